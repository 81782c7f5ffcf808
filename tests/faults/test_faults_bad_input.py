"""Bad input through Dagster's doors, run config and environment: a clear error, and nothing written.

The command line's bad input is tested in tests/cli.
"""

from __future__ import annotations

import math
import re

import dagster as dg
import pytest
from fault_helpers import assert_run_failed, execute, failure_text, tick
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.resources import OvertureResource, StoreResource, configured_resources
from nakodo_dagster.store import open_store

pytestmark = pytest.mark.faults

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe", "pub"))
[RUN] = import_runs({key: list(LEEDS.categories) for key in areas_for(LEEDS)}, areas_for(LEEDS))
[CELL] = RUN.areas


def _nothing_written(store) -> None:
    tables = {
        table: store._transact(lambda tx, table=table: tx.rows(f"SELECT count(*) FROM {table}"))[0][0]
        for table in ("place_imports", "places")
    }
    assert tables == {"place_imports": 0, "places": 0}


BAD_RUNS = {
    "area that is not cell: nor country:": (
        {"areas": ["tile:53.5,-2"], "pairs": [["tile:53.5,-2", "cafe"], ["tile:53.5,-2", "pub"]]},
        r"area 'tile:53.5,-2' is not allowed",
    ),
    "SQL in a category": (
        {"categories": ["cafe", "pub'; DROP TABLE places; --"], "pairs": [[CELL, "cafe"]]},
        r"category \"pub'; DROP TABLE places; --\" is not allowed",
    ),
    "NaN in the box": ({"bbox": [math.nan, 53.5, -1.5, 54.0]}, r"the import run is not the one its pairs make"),
    "a pair not in the run": (
        {"pairs": [[CELL, "cafe"], ["cell:20,20", "pub"]]},
        r"pair \(cell:20,20, pub\) is not one of the run.s areas",
    ),
}


@pytest.mark.parametrize("bad", list(BAD_RUNS))
def test_a_bad_run_config_fails_the_run_and_writes_nothing(instance, duckdb_url, release_root, bad):
    # Refused before the store is touched: one backend is enough.
    resources = {"store": StoreResource(database=duckdb_url), "overture": OvertureResource(root=release_root)}
    change, message = BAD_RUNS[bad]
    request = dg.RunRequest(run_config={"ops": {"import_block": {"config": RUN.payload() | change}}})

    result = execute(instance, resources, request)

    assert_run_failed(instance, result)
    assert re.search(rf"InvalidInput: {message}", failure_text(result)), failure_text(result)
    _nothing_written(resources["store"].store)


BAD_ENVIRONMENTS = {
    "NAKODO_OVERTURE_RELEASE with ../": (
        "NAKODO_OVERTURE_RELEASE",
        f"../{RELEASE}",
        r"release '\.\./.*' is not allowed",
    ),
    "NAKODO_OVERTURE_ROOT pointing nowhere": (
        "NAKODO_OVERTURE_ROOT",
        "/nonexistent/overture",
        r"Overture root '/nonexistent/overture' is not a folder",
    ),
    "NAKODO_DATABASE with another scheme": (
        "NAKODO_DATABASE",
        "mysql://db/nakodo",
        r"store 'mysql://db/nakodo' is not allowed",
    ),
}


def _chain(error: BaseException) -> str:
    messages = []
    while error is not None:
        messages.append(str(error))
        error = error.__cause__ or error.__context__
    return "\n".join(messages)


@pytest.mark.parametrize("bad", list(BAD_ENVIRONMENTS))
def test_a_bad_environment_fails_the_tick_and_the_run_and_writes_nothing(
    instance, duckdb_url, release_root, monkeypatch, bad
):
    name, value, message = BAD_ENVIRONMENTS[bad]
    good = {"NAKODO_DATABASE": duckdb_url, "NAKODO_OVERTURE_ROOT": release_root, "NAKODO_OVERTURE_RELEASE": ""}
    for key, setting in (good | {name: value}).items():
        monkeypatch.setenv(key, setting)
    store = open_store(duckdb_url)
    store.migrate()
    store.add_campaign("Leeds", LEEDS)

    # Built as the code location builds them, from this environment.
    resources = configured_resources()
    with pytest.raises(Exception) as raised:
        tick(instance, resources)
    result = execute(
        instance, resources, dg.RunRequest(run_config={"ops": {"import_block": {"config": RUN.payload()}}})
    )

    assert isinstance(raised.value, InvalidInput) or isinstance(raised.value.__cause__, InvalidInput)
    assert re.search(message, _chain(raised.value)), _chain(raised.value)
    assert_run_failed(instance, result)
    assert re.search(rf"InvalidInput: {message}", failure_text(result)), failure_text(result)
    _nothing_written(store)
