"""The store keeps the planner's statistics itself: tables written to beyond autovacuum's rule since they were last
analyzed are analyzed at the next sensor tick, on a server whose autovacuum is off (as this one's is) or has not come
round yet."""

from __future__ import annotations

import time

import pytest
from store_helpers import query

from bench.soak import fleet
from nakodo_dagster.store import NewCampaign, Store, open_store

CAMPAIGN_TABLES = {"campaigns", "campaign_areas", "campaign_categories"}


def _table_statistics(store: Store) -> dict[str, tuple[int, float, bool]]:
    """Per table of the store: rows written since the last ANALYZE, the rows the planner thinks it has (-1: never
    analyzed), and whether anyone analyzed it, as the server's own catalog says."""
    rows = query(
        store,
        "SELECT stats.relname, stats.n_mod_since_analyze, pg_class.reltuples, "
        "stats.last_analyze IS NOT NULL OR stats.last_autoanalyze IS NOT NULL "
        "FROM pg_stat_user_tables AS stats JOIN pg_class ON pg_class.oid = stats.relid "
        "WHERE stats.schemaname = current_schema()",
    )
    return {name: (written, estimate, analyzed) for name, written, estimate, analyzed in rows}


def _counted(store: Store, tables: set[str]) -> None:
    """Wait until the server counts the writes to ``tables``: a backend reports them as it exits, after the client
    has already moved on."""
    deadline = time.monotonic() + 10
    while not all(_table_statistics(store)[table][0] for table in tables):
        assert time.monotonic() < deadline, "the server never counted the writes"
        time.sleep(0.1)


@pytest.mark.postgres
def test_tables_written_in_bulk_are_analyzed_once_and_then_left_alone(postgres_url):
    store = open_store(postgres_url)
    store.migrate()
    account = store.add_account("agency", "unlimited")
    store.add_campaigns([NewCampaign(f"campaign {i}", account, t) for i, t in enumerate(fleet(300, 0))])
    _counted(store, CAMPAIGN_TABLES)
    before = _table_statistics(store)
    assert all(before[table][1] == -1 for table in CAMPAIGN_TABLES), "nothing analyzed them yet"

    analyzed = store.keep_statistics()

    after = _table_statistics(store)
    assert set(analyzed) >= CAMPAIGN_TABLES
    assert {table for table, (_, _, was_analyzed) in after.items() if was_analyzed} == set(analyzed)
    for table in CAMPAIGN_TABLES:
        [(rows,)] = query(store, f"SELECT count(*) FROM {table}")  # the test's own table names
        assert after[table][:2] == (0, rows), table
    # The rule is autovacuum's: what nothing or little was written to since is not analyzed again.
    assert store.keep_statistics() == []
    store.add_campaign("one more", fleet(1, 1)[0], account_id=account)
    _counted(store, {"campaigns"})
    assert store.keep_statistics() == []
