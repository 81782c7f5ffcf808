"""The everyday commands on a prepared store: listing, showing, pausing, the results table, the freshness table.

In-process with click's runner (a ``nakodo`` process costs a second; the end-to-end test runs the real one).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from click.testing import CliRunner
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.cli import main
from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    LOST_IMPORT,
    REQUESTED,
    RETRY_DAYS,
    CountryLocation,
    ImportRun,
    PointLocation,
    Targeting,
    cell,
)
from nakodo_dagster.store import Store, open_store

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 5), CountryLocation("IE")), ("cafe", "pub"))
CELL = cell(53.5, -2).key


@pytest.fixture
def store(environment, database_url) -> Store:
    store = open_store(database_url)
    store.migrate()
    return store


def invoke(*args: str, expect: int = 0):
    result = CliRunner().invoke(main, list(args))
    assert result.exit_code == expect, f"{args}: {result.exit_code}\n{result.output}\n{result.exception!r}"
    return result


def test_every_listed_command_answers_to_its_name():
    listed = [line.split()[0] for line in invoke("--help").output.partition("Commands:")[2].strip().splitlines()]

    assert len(listed) == 9
    for name in listed:
        assert invoke(name, "--help").output.startswith(f"Usage: main {name} "), name
    assert "No such command 'campain'" in invoke("campain", expect=2).output


def record(store: Store, pairs: list[tuple[str, str]], at: datetime, places: list[dict] = ()) -> None:
    """An import of these pairs landed at ``at`` with these places."""
    areas = tuple(sorted({a for a, _ in pairs}))
    categories = tuple(sorted({c for _, c in pairs}))
    run = ImportRun(areas, categories, (-2.0, 53.5, -1.5, 54.0), None, tuple(sorted(pairs)))
    rows = [
        {"confidence": 0.9, "address": None, "country": "GB", "websites": "[]", "phones": "[]", **place}
        for place in places
    ]
    columns = ["id", "area", "category", "name", "lat", "lng", "confidence", "address", "country", "websites", "phones"]
    table = pa.Table.from_pylist(
        rows,
        schema=pa.schema([(c, pa.float64() if c in ("lat", "lng", "confidence") else pa.string()) for c in columns]),
    )
    store.write_import(run, RELEASE, table, at)


def test_list_show_pause_resume_and_the_results_table(store):
    campaign_id = store.add_campaign("Leeds | cafes", LEEDS)
    record(
        store,
        [(CELL, "cafe"), (CELL, "pub")],
        datetime.now(UTC),
        [
            {"id": "far", "area": CELL, "category": "cafe", "name": "Far Cafe", "lat": 53.80, "lng": -1.60},
            {"id": "near", "area": CELL, "category": "pub", "name": "Near Pub", "lat": 53.80, "lng": -1.55},
        ],
    )
    assert store.add_campaign_businesses(campaign_id, datetime.now(UTC)) == (2, 2)

    listed = invoke("campaign", "list").output.splitlines()
    assert listed[0].split() == ["id", "status", "account", "name", "locations", "categories"]
    assert listed[1].split() == [str(campaign_id), "active", "default", "Leeds", "|", "cafes", "53.7997,-1.5492",
                                 "within", "5", "km;", "IE", "(Ireland)", "cafe,", "pub"]  # fmt: skip
    invoke("campaign", "pause", str(campaign_id))
    assert store.campaign(campaign_id).status == "paused"
    assert "status: paused" in invoke("campaign", "show", str(campaign_id)).output
    invoke("campaign", "resume", str(campaign_id))
    shown = invoke("campaign", "show", str(campaign_id)).output.splitlines()
    assert shown[0] == f"Campaign {campaign_id}: Leeds | cafes"
    assert "status: active" in shown
    assert "account: default (id 1), plan unlimited" in shown
    assert shown[-2:] == ["areas: 2 cells of 0.5 degree, 1 countries", "businesses: 2"]

    table = invoke("results", str(campaign_id)).output.splitlines()
    assert [line.split()[:3] for line in table[1:3]] == [["1", "0.06", "Near"], ["2", "3.34", "Far"]]
    assert table[-1] == "2 businesses"


def test_no_campaign_yet_says_how_to_add_one(store):
    assert "nakodo campaign add --help" in invoke("campaign", "list").output
    assert "nakodo campaign add --help" in invoke("sync").output


def test_imports_status_counts_each_state_per_category(store):
    now = datetime.now(UTC)
    record(store, [(CELL, "cafe"), (cell(54, -2).key, "cafe")], now - timedelta(days=2))
    record(store, [(cell(54, -1.5).key, "cafe")], now - timedelta(days=FRESH_DAYS + 3))
    store.force_request([(cell(50, 0).key, "cafe")], now - timedelta(hours=1))
    store.force_request([(cell(50, 0).key, "pub")], now - timedelta(hours=IMPORT_HOURS + 1))
    lines = invoke("imports", "status").output.splitlines()
    assert lines[0].split() == ["category", "fresh", "on", "their", "way", "failed", "stale", "oldest", "loaded"]
    oldest = (now - timedelta(days=FRESH_DAYS + 3)).strftime("%Y-%m-%d")
    assert lines[1].split() == ["cafe", "2", "1", "0", "1", oldest, f"({FRESH_DAYS + 3}", "days", "ago)"]
    assert lines[2].split() == ["pub", "0", "0", "1", "0", "-"]
    assert "nakodo imports retry" in lines[3]


def test_imports_status_lists_failed_pairs_with_when_and_why_they_failed_and_when_they_are_asked_again(store):
    now = datetime.now(UTC)
    store.add_campaign("Leeds", LEEDS)
    # One import lost without a word (read as failed once its 6 hours are over), one whose failure was recorded.
    asked = now - timedelta(hours=IMPORT_HOURS + 1)
    store.force_request([(CELL, "pub")], asked)
    stamp = store.force_request([(CELL, "cafe")], now - timedelta(minutes=30))
    failed_at = now - timedelta(minutes=20)
    assert store.mark_failed([(CELL, "cafe")], stamp, failed_at, "file part-00003.parquet is unreadable") == 1

    output = invoke("imports", "status").output

    assert "Failed imports campaigns need (2 pairs):" in output
    rows = {line.split()[0]: line.split()[1:] for line in output.splitlines() if "nakodo imports retry" in line}

    def minute(moment: datetime) -> list[str]:
        return [*f"{moment:%Y-%m-%d %H:%M}".split(), "UTC"]

    assert rows["pub"] == [
        CELL,
        *minute(asked + timedelta(hours=IMPORT_HOURS)),
        "[1]",
        *minute(asked + timedelta(days=RETRY_DAYS)),
        *f"nakodo imports retry {CELL} pub".split(),
    ]
    assert rows["cafe"] == [
        CELL,
        *minute(failed_at),
        "[2]",
        *minute(failed_at + timedelta(days=RETRY_DAYS)),
        *f"nakodo imports retry {CELL} cafe".split(),
    ]
    assert f"[1] {LOST_IMPORT}" in output.splitlines()
    assert "[2] file part-00003.parquet is unreadable" in output.splitlines()


def test_nothing_imported_yet(store):
    lines = invoke("imports", "status").output.splitlines()
    assert lines[0] == "Nothing imported or asked for yet."
    assert lines[2].startswith("Import line: 0 blocks wait for the queue.")
    assert lines[3] == "No active campaign waits for its first businesses."


def test_retry_forgets_only_a_failed_import(store):
    now = datetime.now(UTC)
    store.force_request([(CELL, "cafe")], now - timedelta(hours=IMPORT_HOURS + 1))
    store.force_request([(CELL, "pub")], now - timedelta(hours=1))
    record(store, [(CELL, "bakery")], now - timedelta(days=1))
    record(store, [(CELL, "bar")], now - timedelta(days=FRESH_DAYS + 1))

    assert "Forgot the failed import of cafe in cell:53.5,-2" in invoke("imports", "retry", CELL, "cafe").output
    assert store.import_rows([CELL], ["cafe"]) == []
    assert "never imported nor asked for" in invoke("imports", "retry", CELL, "cafe").output
    assert "is on its way" in invoke("imports", "retry", CELL, "pub", expect=1).output
    assert "did not fail" in invoke("imports", "retry", CELL, "bakery", expect=1).output
    assert "is stale" in invoke("imports", "retry", CELL, "bar").output
    assert {(r.category, r.release) for r in store.import_rows([CELL], ["pub", "bakery", "bar"])} == {
        ("pub", REQUESTED),
        ("bakery", RELEASE),
        ("bar", RELEASE),
    }
