"""Real faults on real parts: a fault-injecting proxy before the S3 server, worker processes to kill, a private
PostgreSQL to restart. The shared PostgreSQL on 127.0.0.1:5432 is never stopped: other tests use it."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from overture_helpers import PREFIX, s3_client, upload_releases

from bench.fault_proxy import FaultProxy, start_proxy
from bench.throwaway_postgres import ThrowawayPostgres, start_throwaway_postgres

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


@pytest.fixture
def private_postgres() -> Iterator[ThrowawayPostgres]:
    """A PostgreSQL cluster of this test alone, which it may restart; stopped afterwards."""
    server = start_throwaway_postgres()
    try:
        yield server
    finally:
        server.stop()
