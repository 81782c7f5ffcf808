"""Fixtures every layer shares: a throwaway PostgreSQL database, both store URLs, a Dagster instance, a sample
release and an S3-compatible server on loopback."""

from __future__ import annotations

import os
import signal
import uuid
from collections.abc import Iterator
from importlib.resources import files

import dagster as dg
import psycopg2
import pytest
from hypothesis import HealthCheck, settings
from moto.server import ThreadedMotoServer
from overture_helpers import CURRENT as RELEASE

from bench.throwaway_postgres import ThrowawayPostgres, answers, start_throwaway_postgres
from nakodo_dagster.overture.sample import write_sample_release
from nakodo_dagster.redact import redacted_url
from nakodo_dagster.resources import OvertureResource, StoreResource

# Every test has a time limit, past which it fails with every thread's stack, and a hang in native code ends the suite.
pytest_plugins = ["time_limit"]

# Hypothesis times each example against a deadline: on a loaded CI machine that fails correct code.
settings.register_profile("nakodo", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("nakodo")

POSTGRES_VARIABLE = "NAKODO_TEST_POSTGRES"
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"

# A shell that starts the suite in the background without job control (`make test &` in a script) leaves SIGINT
# ignored, in this process and in every one it starts; Python then never raises KeyboardInterrupt, and Dagster maps
# SIGTERM to that same ignored handler. The tests that stop a run, an import or `make run` as Dagster and a user do
# would fail for the shell's sake: the suite takes Python's own handler back, which its children inherit as the
# default.
signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="session", autouse=True)
def _index_folder_of_its_own(tmp_path_factory) -> Iterator[None]:
    """Release indexes in folders of the session's, never the developer's: NAKODO_OVERTURE_INDEX for what is
    configured from the environment (the definitions, the CLI, subprocesses), and a cache of its own for resources
    built without a folder (no NAKODO_DATABASE for them to sit beside: see pytest_configure)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NAKODO_OVERTURE_INDEX", str(tmp_path_factory.mktemp("overture_index")))
        patch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
        yield


# The server the suite uses, settled by pytest_configure; where nothing answered at the configured one, a throwaway
# cluster of the suite's own, stopped at the end.
_admin_url = DEFAULT_POSTGRES
_throwaway: ThrowawayPostgres | None = None
_configured: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Settle the suite's PostgreSQL before any test module is imported: the server NAKODO_TEST_POSTGRES names (by
    default the machine's on 127.0.0.1:5432), or, where nothing answers there, a throwaway cluster of the suite's
    own. The variable names the one chosen, for the processes tests start."""
    global _admin_url, _throwaway, _configured
    # `make test` exports the project's NAKODO_DATABASE. Gone before any test module imports the definitions, which
    # bind a variable set at import as an EnvVar read at run time: removed later, runs built from those definitions
    # failed on its absence.
    os.environ.pop("NAKODO_DATABASE", None)
    _configured = os.environ.get(POSTGRES_VARIABLE)
    _admin_url = _configured or DEFAULT_POSTGRES
    if not answers(_admin_url):
        _throwaway = start_throwaway_postgres()
        _admin_url = _throwaway.url
    os.environ[POSTGRES_VARIABLE] = _admin_url


def pytest_unconfigure(config: pytest.Config) -> None:
    global _throwaway
    if _throwaway is not None:
        _throwaway.stop()
        _throwaway = None
    if _configured is None:
        os.environ.pop(POSTGRES_VARIABLE, None)
    else:
        os.environ[POSTGRES_VARIABLE] = _configured


def pytest_report_header(config: pytest.Config) -> str:
    if _throwaway is None:
        return f"PostgreSQL: {redacted_url(_admin_url)}"
    configured = redacted_url(_configured or DEFAULT_POSTGRES)
    return f"PostgreSQL: nothing answers at {configured}; a throwaway server of the suite's own at {_admin_url}"


def _admin_connection():
    connection = psycopg2.connect(_admin_url)
    connection.autocommit = True
    return connection


@pytest.fixture
def pg_admin_url() -> str:
    """The PostgreSQL database tests create their own databases from."""
    return _admin_url


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database of its own, dropped afterwards."""
    name = f"nakodo_test_{uuid.uuid4().hex[:12]}"
    admin = _admin_connection()
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        yield f"{_admin_url.rpartition('/')[0]}/{name}"
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


@pytest.fixture
def duckdb_url(tmp_path) -> str:
    """A DuckDB store file path in a temporary folder."""
    return str(tmp_path / "store.duckdb")


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request) -> str:
    """The same test against both store backends: a DuckDB file and a PostgreSQL database."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    """A local Dagster instance in a temporary DAGSTER_HOME, with the project's pool limit."""
    with dg.instance_for_test(overrides={"concurrency": {"pools": {"default_limit": 2}}}) as instance:
        yield instance


@pytest.fixture(scope="session")
def release_root(tmp_path_factory) -> str:
    """A small sample release in Overture's layout, shared by the tests that only read it."""
    root = tmp_path_factory.mktemp("overture")
    write_sample_release(root, release=RELEASE, rows=20_000, files=4, row_group_rows=500, seed=7, progress=False)
    return str(root)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[str]:
    """An S3-compatible server on loopback (moto), its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@pytest.fixture
def resources(database_url: str, release_root: str) -> dict:
    """The code location's resources on a fresh store (both backends) and the sample release."""
    return {"store": StoreResource(database=database_url), "overture": OvertureResource(root=release_root)}


@pytest.fixture
def solo_plan(tmp_path, monkeypatch) -> str:
    """The shipped plans and a small paid one, ``solo`` (1 campaign, 25 areas, no country), named by NAKODO_PLANS:
    the free plan holds no campaign, so the limits' arithmetic is tried on this one. Returns the plan's name."""
    plans = tmp_path / "plans_with_solo.toml"
    shipped = files("nakodo_dagster").joinpath("data", "plans.toml").read_text("utf-8")
    plans.write_text(shipped + "\n[solo]\ncampaigns = 1\nareas = 25\ncountries = 0\n", encoding="utf-8")
    monkeypatch.setenv("NAKODO_PLANS", str(plans))
    return "solo"
