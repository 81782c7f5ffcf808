"""Choosing a backend, migrating it, and sharing one DuckDB file between processes."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from store_helpers import NOW, query, reserve_pairs, schema_version

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.store import DuckDBStore, PostgresStore, StoreLocked, open_store
from nakodo_dagster.store.schema import MIGRATIONS

NEWEST = MIGRATIONS[-1][0]
LEEDS = Targeting((PointLocation(53.8, -1.55, 10),), ("cafe",))
TABLES = ("campaign_businesses", "campaigns", "place_imports", "places", "schema_migrations")


def test_open_store_picks_the_backend_by_url(tmp_path):
    assert isinstance(open_store(str(tmp_path / "a" / "store.duckdb")), DuckDBStore)
    assert isinstance(open_store("postgresql://postgres@127.0.0.1:5432/nakodo"), PostgresStore)
    for url in ("", "  ", ":memory:", "mysql://db/nakodo", "s3://bucket/store.duckdb", None):
        with pytest.raises(InvalidInput, match=r"DuckDB file path .* or a postgresql:// URL"):
            open_store(url)


def _tables(store) -> list[str]:
    rows = query(
        store,
        "SELECT table_name FROM information_schema.tables WHERE table_name IN (SELECT unnest($names::TEXT[]))",
        names=list(TABLES),
    )
    return sorted(row[0] for row in rows)


def test_lists_reach_the_database_as_the_same_values(store):
    # Area keys and categories are checked before they get here; the list parameter itself must still be exact.
    texts = ["cell:53.5,-2", 'with "quotes"', "back\\slash", "comma,{brace}", "", "NULL", " spaced ", "ünï"]
    numbers = [0.1, -180.0, 1e-300, 89.99999999999999]
    assert [row[0] for row in query(store, "SELECT unnest($texts::TEXT[])", texts=texts)] == texts
    assert [row[0] for row in query(store, "SELECT unnest($numbers::FLOAT8[])", numbers=numbers)] == numbers
    assert query(store, "SELECT count(*) FROM (SELECT unnest($empty::TEXT[])) AS t", empty=[]) == [(0,)]


def test_migrate_twice_is_a_no_op(store):
    campaign = store.add_campaign("Kept", LEEDS)
    store.migrate()
    assert schema_version(store) == NEWEST
    assert _tables(store) == sorted(TABLES)
    assert query(store, "SELECT version FROM schema_migrations") == [(v,) for v, _ in MIGRATIONS]
    assert store.campaign(campaign).name == "Kept"


def test_migrate_from_several_processes_at_once(database_url, workers):
    assert workers.run("migrate", database_url, [{}] * 8) == [NEWEST] * 8
    store = open_store(database_url)
    assert query(store, "SELECT version FROM schema_migrations") == [(v,) for v, _ in MIGRATIONS]
    assert _tables(store) == sorted(TABLES)


def _hold(path: str, workers):
    """Another process with the DuckDB file open, until told to let go."""
    [holder] = workers.start("hold", path, [{}])
    workers.go([holder])
    assert holder.stdout.readline().strip() == "holding"
    return holder


def test_a_duckdb_file_locked_too_long_fails_naming_file_and_holder(duckdb_url, workers):
    DuckDBStore(duckdb_url).migrate()
    holder = _hold(duckdb_url, workers)
    with pytest.raises(StoreLocked, match=rf"{re.escape(duckdb_url)}.*stayed locked for 0.3 s.*PID {holder.pid}"):
        DuckDBStore(duckdb_url, lock_timeout=0.3).import_rows(["cell:53.5,-2"], ["cafe"])


def test_a_duckdb_store_waits_for_the_lock_and_then_works(duckdb_url, workers):
    store = DuckDBStore(duckdb_url, lock_timeout=30)
    store.migrate()
    holder = _hold(duckdb_url, workers)
    outcome = {}
    waiting = threading.Thread(
        target=lambda: outcome.update(got=reserve_pairs(store, {"cell:53.5,-2": ["cafe"]}, NOW, NOW))
    )
    waiting.start()
    waiting.join(0.5)
    assert waiting.is_alive(), "the store did not wait for the lock"
    workers.go([holder])
    waiting.join(30)
    assert outcome == {"got": {"cell:53.5,-2": ["cafe"]}}


def test_calls_in_a_held_block_are_each_their_own_transaction(store):
    store.add_campaign("Leeds", LEEDS, now=NOW)
    with store.held():
        # Each count makes the same temp tables: a call's are gone with it.
        store.recount_coverage(NOW)
        store.recount_coverage(NOW)
        with pytest.raises(ZeroDivisionError):
            store._transact(lambda tx: (tx.run("UPDATE campaigns SET name = 'Gone'"), 1 / 0))
        kept = store.add_campaign("York", LEEDS, now=NOW)
    assert [campaign.name for campaign in store.campaigns()] == ["Leeds", "York"], "only the failed call rolled back"
    assert store.campaign(kept).name == "York"


def test_a_held_duckdb_file_is_opened_once_and_other_processes_wait_until_the_block_ends(
    duckdb_url, workers, monkeypatch
):
    store = DuckDBStore(duckdb_url)
    store.migrate()
    opened = []
    connect = DuckDBStore._connect
    monkeypatch.setattr(DuckDBStore, "_connect", lambda self, path: opened.append(path) or connect(self, path))
    [migrator] = workers.start("migrate", duckdb_url, [{}])
    with store.held():
        DuckDBStore(duckdb_url).migrate()
        store.add_campaign("Leeds", LEEDS, now=NOW)
        store.recount_coverage(NOW)
        workers.go([migrator])
        time.sleep(0.5)
        assert migrator.poll() is None, "another process waits for the held file"
        store.coverage(NOW, 5)
    assert len(opened) == 1, "one open for the block, whichever store of the file calls in it"
    assert not Path(f"{duckdb_url}.wal").exists(), "what the block wrote was checkpointed once, on closing"
    assert workers.results([migrator]) == [NEWEST]
