"""Releases on an S3-compatible server on loopback (moto), read as Overture's bucket is: by the bench's readers
behind a latency, by the fault soak behind faults."""

from __future__ import annotations

import contextlib
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from nakodo_dagster.overture.sample import publish_releases

BUCKET = "nakodo-bench"
PREFIX = "release"


def s3_client(host: str, port: int) -> Any:
    """A boto3 client of the loopback server at ``host``:``port``, allowed to write its bucket."""
    return boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        region_name="us-west-2",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )


@contextlib.contextmanager
def loopback_releases(local_root: Path) -> Iterator[tuple[str, tuple[str, int]]]:
    """Every release under ``local_root`` on a fresh loopback S3 server, readable by anyone: its s3:// root and
    the server's (host, port), for a proxy to stand in front of."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield publish_releases(s3_client(host, port), local_root, BUCKET, PREFIX), (host, port)
    finally:
        # moto keeps its buckets per process, not per server: without the reset, the next server would find the
        # bucket already there (and refuse to create it), and the last release would stay in memory.
        urllib.request.urlopen(urllib.request.Request(f"http://{host}:{port}/moto-api/reset", method="POST")).close()
        server.stop()
