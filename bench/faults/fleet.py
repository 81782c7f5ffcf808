"""The fleet the soak runs and hurts: the daemon (killed and started again on demand) and its code server, the webserver
whose GraphQL API cancels runs, the PostgreSQL cluster of the store and Dagster's storage, and the releases on a
loopback S3 server behind the fault proxy."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
from dagster_graphql import DagsterGraphQLClient

from bench.daemon import PROJECT, running_daemon, stop_group
from bench.fault_proxy import FaultProxy, start_proxy
from bench.proxy import LatencyProxy
from bench.s3 import BUCKET, PREFIX, loopback_releases, s3_client
from bench.throwaway_postgres import ThrowawayPostgres, free_port, start_throwaway_postgres

# How long the webserver (and the code server it starts) may take to answer: two shared cores, a busy daemon.
WEBSERVER_START_SECONDS = 180


@dataclass
class Releases:
    """The releases of the soak: those online (oldest first; the newest is the one imports read), those written
    and waiting to be published mid-soak, where each is on this machine, and the timers that will put back files
    cut short."""

    online: list[str]
    waiting: list[str] = field(default_factory=list)
    folders: dict[str, Path] = field(default_factory=dict)
    restores: list[threading.Timer] = field(default_factory=list)


@dataclass(frozen=True)
class ObjectStore:
    """The sample releases on a loopback S3 server: its s3:// root, read through the fault ``proxy``; a ``client``
    of the server itself and the latency proxy's ``copies`` of what it serves, to change the bucket under the
    readers."""

    root: str
    proxy: FaultProxy
    client: Any
    copies: LatencyProxy

    def files(self, release: str) -> list[str]:
        """The keys of the release's files in the bucket."""
        listed = self.client.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/{release}/")
        return [item["Key"] for item in listed.get("Contents", [])]

    def cut_short(self, release: str) -> Callable[[], None]:
        """Every file of ``release`` cut to its first half in place, as a copy interrupted half way or a disk that
        lost its tail leaves it; returns what puts them back whole."""
        whole = {key: self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in self.files(release)}
        for key, data in whole.items():
            self._put(key, data[: len(data) // 2])

        def restore() -> None:
            for key, data in whole.items():
                self._put(key, data)

        return restore

    def publish(self, root: Path, release: str) -> None:
        """The release under the local ``root`` uploaded beside the others, as Overture publishes a new one."""
        for path in sorted((root / release).rglob("*.parquet")):
            self.client.upload_file(str(path), BUCKET, f"{PREFIX}/{path.relative_to(root).as_posix()}")

    def _put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=data)
        # The latency proxy answers range reads from its copy: without this, readers would never see the change.
        self.copies.forget(key.rsplit("/", 1)[-1])


def daemon_home(
    folder: Path,
    release_root: str,
    database: str | None = None,
    endpoint: str | None = None,
    instance_database: str | None = None,
) -> tuple[Path, dict[str, str]]:
    """A workspace of the code location in ``folder`` and the environment a daemon serving it runs with: a fresh
    DAGSTER_HOME holding the embedded default's dagster.yaml, the store ``database`` (default: a DuckDB file beside
    it), a release index beside it, and, for an s3:// ``release_root``, the S3-compatible ``endpoint`` to read it
    from, anonymously as Overture's bucket is read. With ``instance_database`` (a ``postgresql://`` URL), Dagster's
    own storage (runs, events, schedules) is there instead of SQLite files, as production's is."""
    home = folder / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "nakodo_dagster" / "data" / "dagster.yaml", home / "dagster.yaml")
    if instance_database:
        # SQLAlchemy 2.1 no longer picks psycopg2 for `postgresql://` (deploy/production/dagster.yaml says the same).
        url = instance_database.replace("postgresql://", "postgresql+psycopg2://", 1)
        with (home / "dagster.yaml").open("a") as config:
            config.write("\n" + yaml.safe_dump({"storage": {"postgres": {"postgres_url": url}}}))
    workspace = folder / "workspace.yaml"
    location = {"module_name": "nakodo_dagster.definitions", "working_directory": str(folder)}
    workspace.write_text(yaml.safe_dump({"load_from": [{"python_module": location}]}))
    environ = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("NAKODO_", "DAGSTER_", "AWS_"))},
        "DAGSTER_HOME": str(home),
        "NAKODO_DATABASE": database or str(folder / "store.duckdb"),
        "NAKODO_OVERTURE_ROOT": release_root,
        "NAKODO_OVERTURE_RELEASE": "",
        "NAKODO_OVERTURE_INDEX": str(folder / "overture_index"),
        **({"AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true"} if endpoint else {}),
    }
    return workspace, environ


class Fleet:
    """The daemon serving the soak, killed and started again on demand; the PostgreSQL cluster of its store (None
    for a DuckDB store), stopped and started again on demand; its object store (behind the fault proxy) and the
    releases on it."""

    def __init__(
        self,
        workspace: Path,
        environ: dict[str, str],
        folder: Path,
        remote: ObjectStore,
        releases: Releases,
        postgres: ThrowawayPostgres | None = None,
    ) -> None:
        self.workspace, self.environ, self.folder, self.remote, self.releases, self.postgres = (
            workspace,
            environ,
            folder,
            remote,
            releases,
            postgres,
        )
        self.starts = 0
        self._stack = contextlib.ExitStack()
        self.daemon: subprocess.Popen | None = None
        # The webserver's GraphQL API, once it answers.
        self.api: DagsterGraphQLClient | None = None

    def start(self) -> float:
        self.starts += 1
        log = self.folder / f"daemon_{self.starts}.log"
        self.daemon = self._stack.enter_context(running_daemon(self.workspace, self.environ, log))
        return time.monotonic()

    def kill(self) -> None:
        """SIGKILL to the daemon's whole process group: the daemon, its code server, fork server and run workers."""
        assert self.daemon is not None
        os.killpg(self.daemon.pid, signal.SIGKILL)
        self.daemon.wait()
        self._stack.close()

    def stop_store(self, seconds: float) -> None:
        """The store's PostgreSQL stopped at once (every connection cut, nothing answering) for ``seconds``, then
        started again, as a crashed server is by its service manager."""
        assert self.postgres is not None
        self.postgres.halt()
        try:
            time.sleep(seconds)
        finally:
            self.postgres.start()

    def kill_code_server(self) -> int | None:
        """SIGKILL to the daemon's code server alone (the gRPC process serving the code location), the daemon, its
        fork server and run workers left running; its pid, or None if the daemon runs none at the moment (one killed
        before and not started again yet)."""
        assert self.daemon is not None
        children = psutil.Process(self.daemon.pid).children(recursive=True)
        servers = [child for child in children if _is_code_server(child)]
        for server in servers:
            with contextlib.suppress(psutil.NoSuchProcess):
                server.kill()
        return servers[0].pid if servers else None

    def stop(self) -> None:
        self._stack.close()

    def log_tail(self) -> str:
        return (self.folder / f"daemon_{self.starts}.log").read_text()[-3000:]


def _is_code_server(process: psutil.Process) -> bool:
    """Whether a process is a code server (``dagster api grpc`` or ``dagster code-server start``)."""
    with contextlib.suppress(psutil.Error):
        words = process.cmdline()
        return "grpc" in words or "code-server" in words
    return False


@contextlib.contextmanager
def running_webserver(workspace: Path, environ: dict[str, str], log: Path) -> Iterator[DagsterGraphQLClient]:
    """``dagster-webserver`` serving ``workspace`` on a free loopback port (with a code server of its own, as a
    deployment's webserver has), and a GraphQL client of it: the API a user or a script cancels a run through."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(port)]
    with log.open("w") as out:
        # A session of its own: the daemon's process group killed as a fault leaves it serving.
        server = subprocess.Popen(
            [*command, "-w", str(workspace)],
            env=environ,
            cwd=workspace.parent,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + WEBSERVER_START_SECONDS
        while not _serves(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dagster-webserver did not answer; see {log}")
            time.sleep(0.5)
        yield DagsterGraphQLClient("127.0.0.1", port_number=port, timeout=60)
    finally:
        stop_group(server)


def _serves(port: int) -> bool:
    """Whether the webserver answers its server_info (it listens a moment before it does)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


def wait_for(what: str, seconds: float, ready: Callable[[], object], fleet: Fleet) -> object:
    deadline = time.monotonic() + seconds
    while not (found := ready()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {seconds:.0f} s for {what}\n{fleet.log_tail()}")
        time.sleep(0.2)
    return found


@contextlib.contextmanager
def object_store(release_root: str) -> Iterator[ObjectStore]:
    """The releases under ``release_root`` on a loopback S3 server, behind the fault proxy."""
    # moto reads a whole object for each range GET (bench.proxy): the latency proxy, at no latency, answers them
    # from its copy instead, so that a big release costs the machine what S3's would.
    with loopback_releases(Path(release_root)) as (root, upstream), LatencyProxy(upstream, 0.0) as copies:
        # Unbounded: the soak's own deadlines stop a client that retries for ever.
        proxy, server = start_proxy(copies.url, limit=None)
        try:
            yield ObjectStore(root, proxy, s3_client(*upstream), copies)
        finally:
            server.shutdown()
            server.server_close()


@contextlib.contextmanager
def store_server(store: str) -> Iterator[ThrowawayPostgres | None]:
    if store == "duckdb":
        yield None
        return
    server = start_throwaway_postgres()
    try:
        yield server
    finally:
        server.stop()
