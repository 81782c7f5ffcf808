"""The schema's migrations, applied in one transaction (two across a version DuckDB needs alone), and the work some
versions need beyond their statements:
what the store keeps of campaigns older than the tables that keep it."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from nakodo_dagster.store import campaigns, coverage, needs
from nakodo_dagster.store.schema import MIGRATIONS

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

# The version whose tables keep each campaign's needs (campaign_areas, campaign_categories).
_CAMPAIGN_NEEDS_VERSION = 3
# The version that keeps each campaign's first area (campaigns.first_area).
_FIRST_AREA_VERSION = 5
# The version that counts each pair's campaigns (needed_pairs).
_NEEDED_PAIRS_VERSION = 6
# The version that keeps where the coverage count stopped in each of its ranges.
_COUNT_RANGES_VERSION = 14

CREATE_SCHEMA_MIGRATIONS = (
    "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
)
SCHEMA_VERSION = "SELECT coalesce(max(version), 0) FROM schema_migrations"
RECORD_MIGRATION = "INSERT INTO schema_migrations (version, applied_at) VALUES ($version, $now)"


# Versions that begin a transaction of their own when an upgrade crosses them: DuckDB fails the commit of a transaction
# that alters a table after writing it ("another transaction has altered this table"), and version 20 alters
# place_imports, which version 17 writes.
_OWN_TRANSACTION = frozenset({20})


def migrate(tx: Transaction, lock: str | None, of_its_own: Mapping[int, tuple[str, ...]]) -> bool:
    """Upgrade the tables towards the newest schema (``Store.migrate``): ``lock`` first if the backend needs one, and
    after each version's statements the backend's own for it (``of_its_own``). Returns whether the schema is the
    newest; False when it stopped before a version of ``_OWN_TRANSACTION``, for the next transaction to go on."""
    if lock:
        tx.rows(lock)
    tx.run(CREATE_SCHEMA_MIGRATIONS)
    [(reached,)] = tx.rows(SCHEMA_VERSION)
    newest = True
    for version, statements in MIGRATIONS:
        if version > reached:
            if version in _OWN_TRANSACTION and tx.rows(SCHEMA_VERSION)[0][0] > reached:
                newest = False
                break
            for statement in (*statements, *of_its_own.get(version, ())):
                tx.run(statement)
            if version == _COUNT_RANGES_VERSION:
                coverage.start_import_ranges(tx)
            tx.run(RECORD_MIGRATION, version=version, now=datetime.now(UTC))
    if reached < _FIRST_AREA_VERSION:
        # Campaigns older than the columns that keep their needs: their areas come from Python.
        older = campaigns.every_campaign(tx)
        if reached < _CAMPAIGN_NEEDS_VERSION:
            needs.keep_campaign_needs(tx, {campaign.id: campaign.targeting for campaign in older})
        for campaign in older:
            needs.keep_first_area(tx, campaign.id, campaign.targeting)
    if reached < _NEEDED_PAIRS_VERSION:
        needs.count_needed_pairs(tx)
    return newest


def schema_version(tx: Transaction) -> int:
    """The newest migration this database has applied."""
    return tx.rows(SCHEMA_VERSION)[0][0]
