"""Real faults on real parts: a fault-injecting proxy before the S3 server, worker processes to kill, a private
PostgreSQL to restart. The shared PostgreSQL on 127.0.0.1:5432 is never stopped: other tests use it."""

from __future__ import annotations

import glob
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fault_proxy import FaultProxy, start_proxy
from overture_helpers import PREFIX, s3_client, upload_releases

WORKER = Path(__file__).with_name("fault_worker.py")


@dataclass(frozen=True)
class RemoteRelease:
    """The sample release in a bucket of its own, read through the fault proxy; ``client`` talks to S3 directly."""

    root: str
    bucket: str
    proxy: FaultProxy
    client: object


@pytest.fixture
def remote_release(s3_server: str, release_root: str, monkeypatch) -> Iterator[RemoteRelease]:
    """The sample release on the loopback S3 server, behind the fault proxy, anonymous as Overture's bucket is."""
    bucket = f"faults-{uuid.uuid4().hex[:12]}"
    client = s3_client(s3_server)
    upload_releases(client, Path(release_root), bucket)
    proxy, server = start_proxy(s3_server)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.endpoint)
    try:
        yield RemoteRelease(f"s3://{bucket}/{PREFIX}", bucket, proxy, client)
    finally:
        server.shutdown()
        server.server_close()


class Workers:
    """fault_worker.py processes: started together, each released once every one of them is ready."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []

    def start(self, command: str, args: dict) -> subprocess.Popen:
        """A worker loading what it needs; it waits at its starting line."""
        process = subprocess.Popen(
            [sys.executable, str(WORKER), command, json.dumps(args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.processes.append(process)
        return process

    def go(self, *processes: subprocess.Popen) -> None:
        """Wait until every one is ready, then release them at the same moment."""
        for process in processes:
            assert process.stdout.readline().strip() == "ready"
        for process in processes:
            process.stdin.write("\n")
            process.stdin.flush()


@pytest.fixture
def workers() -> Iterator[Workers]:
    """Worker processes, the ones still alive killed after the test."""
    started = Workers()
    yield started
    for process in started.processes:
        if process.poll() is None:
            process.kill()
        process.communicate()


@dataclass(frozen=True)
class PrivatePostgres:
    """A PostgreSQL server of this test alone, which it may restart."""

    url: str
    data: str
    pg_ctl: str
    log: str

    def restart(self) -> None:
        """Restart the server the way an operator (or a failover) does: every connection is cut."""
        _as_postgres([self.pg_ctl, "-D", self.data, "-l", self.log, "-m", "fast", "-w", "restart"])


def _as_postgres(command: list[str]) -> None:
    # PostgreSQL refuses to run as root.
    subprocess.run(["runuser", "-u", "postgres", "--", *command], check=True, capture_output=True, timeout=60)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    """A throwaway PostgreSQL cluster on a free loopback port, trust authentication, stopped afterwards."""
    binaries = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
    if not binaries or not shutil.which("runuser"):
        pytest.skip("a private PostgreSQL needs /usr/lib/postgresql/*/bin and runuser to run it as postgres")
    folder = tempfile.mkdtemp(prefix="nakodo-pg-")
    shutil.chown(folder, "postgres")
    data, port = f"{folder}/data", _free_port()
    pg_ctl = f"{binaries[-1]}/pg_ctl"
    _as_postgres([f"{binaries[-1]}/initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync"])
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c fsync=off"
    _as_postgres([pg_ctl, "-D", data, "-o", options, "-l", f"{folder}/log", "-w", "start"])
    try:
        yield PrivatePostgres(f"postgresql://postgres@127.0.0.1:{port}/postgres", data, pg_ctl, f"{folder}/log")
    finally:
        _as_postgres([pg_ctl, "-D", data, "-m", "immediate", "-w", "stop"])
        shutil.rmtree(folder, ignore_errors=True)
