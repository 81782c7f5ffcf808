"""`make test` on a machine where no PostgreSQL answers: the suite starts a throwaway server of its own, runs every
PostgreSQL test against it, skips none, and leaves nothing running."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import psycopg2
import pytest

from bench.throwaway_postgres import answers, packaged_server_binaries, start_throwaway_postgres

pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.postgres]

ROOT = Path(__file__).parent.parent
# A few PostgreSQL tests of the store: enough to show them connecting, creating and dropping their databases.
SUBSET = ["tests/store/test_store_marks.py", "-m", "postgres", "-k", "reserved_once or boundaries or eight_processes"]
THROWAWAY = re.compile(r"nothing answers at (\S+); a throwaway server of the suite's own at (\S+)")


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _suite(prefix: list[str], environment: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *SUBSET],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _assert_ran_on_a_throwaway_server(result: subprocess.CompletedProcess, configured: str) -> str:
    assert result.returncode == 0, result.stdout + result.stderr
    header = THROWAWAY.search(result.stdout)
    assert header, result.stdout
    assert header.group(1) == configured
    summary = result.stdout.strip().splitlines()[-1]
    assert re.search(r"\d+ passed", summary), summary
    assert "skipped" not in summary and "deselected" in summary, summary
    return header.group(2)


def test_a_suite_pointed_at_a_closed_port_brings_its_own_server_and_stops_it(pg_admin_url):
    configured = f"postgresql://postgres@127.0.0.1:{_closed_port()}/test"
    result = _suite([], {**os.environ, "NAKODO_TEST_POSTGRES": configured})
    throwaway = _assert_ran_on_a_throwaway_server(result, configured)
    assert throwaway != configured
    assert not answers(throwaway), "the throwaway server outlived the suite"
    # The server this suite itself uses (the machine's shared one, or this run's own) is left as it was.
    assert answers(pg_admin_url)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="a network namespace needs root")
def test_a_suite_with_nothing_on_5432_and_no_server_configured_brings_its_own():
    # A network namespace of its own: its loopback has nothing on 5432, whatever this machine runs.
    environment = {k: v for k, v in os.environ.items() if k != "NAKODO_TEST_POSTGRES"}
    prefix = ["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$@"', "sh"]
    result = _suite(prefix, environment)
    _assert_ran_on_a_throwaway_server(result, "postgresql://postgres@127.0.0.1:5432/test")


def test_the_packaged_server_binaries_run_a_cluster():
    # What a machine with no PostgreSQL of its own uses: the server the dev extra installs.
    server = start_throwaway_postgres(packaged_server_binaries())
    try:
        with psycopg2.connect(server.url) as connection, connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            assert cursor.fetchone()[0].split(".")[0] == "18"
    finally:
        server.stop()
    assert not answers(server.url) and not os.path.exists(server.folder)


def test_a_database_made_on_the_cluster_outlives_its_stops():
    # The fault soak keeps Dagster's storage in a database of the cluster it stops: no connection of the maker is
    # left to break, and the database is there again once the cluster starts.
    server = start_throwaway_postgres()
    try:
        url = server.create_database("dagster")
        server.halt()
        server.start()
        with psycopg2.connect(url) as connection, connection.cursor() as cursor:
            cursor.execute("SELECT current_database()")
            assert cursor.fetchone()[0] == "dagster"
    finally:
        server.stop()
    assert not answers(server.url)
