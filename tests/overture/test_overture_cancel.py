"""A cancelled read stops its DuckDB query at once: Dagster delivers a run's cancel to its step as an interrupt on the
main thread, and the query it interrupts must stop reading the release there, not minutes later."""

from __future__ import annotations

import os
import signal
import threading
import time
from urllib.parse import urlsplit

import dagster as dg
import pytest
from dagster._utils.interrupts import capture_interrupts, raise_interrupts_as
from overture_helpers import CURRENT, block_run

from bench.proxy import LatencyProxy
from nakodo_dagster.overture.reader import read_places

# Long enough that the read lasts tens of seconds (its requests run two at a time), short enough that the requests
# in flight when the cancel lands end within a second.
LATENCY_S = 0.5
# A request DuckDB had sent when it was interrupted still comes back; one per thread of DuckDB's at most.
IN_FLIGHT = os.cpu_count() or 2


def test_a_cancelled_read_stops_its_duckdb_query_where_it_is(s3_root, s3_server, monkeypatch):
    endpoint = urlsplit(s3_server)
    with LatencyProxy((endpoint.hostname, endpoint.port), latency=LATENCY_S) as proxy:
        monkeypatch.setenv("AWS_ENDPOINT_URL", proxy.url)
        interrupted_after: list[int] = []

        def cancel_once_reading() -> None:
            deadline = time.monotonic() + 60
            while proxy.traffic.requests < 5:
                assert time.monotonic() < deadline, "the read never started"
                time.sleep(0.05)
            interrupted_after.append(proxy.traffic.requests)
            os.kill(os.getpid(), signal.SIGINT)

        canceller = threading.Thread(target=cancel_once_reading)
        with (
            pytest.raises(dg.DagsterExecutionInterruptedError),
            capture_interrupts(),
            raise_interrupts_as(dg.DagsterExecutionInterruptedError),
        ):
            canceller.start()
            # Without an index, DuckDB reads the release itself, over HTTP, a row group at a time.
            read_places(block_run(52.0, -2.0), s3_root, CURRENT, index_dir=None)
        canceller.join()
        when_raised = proxy.traffic.requests
        time.sleep(3 * LATENCY_S)
        assert proxy.traffic.requests == when_raised, "DuckDB went on reading after the read was cancelled"
        # Left to notice the interrupt itself, DuckDB read on for 16 to 24 requests.
        assert when_raised - interrupted_after[0] <= IN_FLIGHT
