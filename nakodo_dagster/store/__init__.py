"""One store interface, two backends chosen by a URL: a DuckDB file (the default) or PostgreSQL.

Call ``migrate()`` once before use: ``open_store`` itself touches nothing.
"""

from __future__ import annotations

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.redact import redacted_url
from nakodo_dagster.store.base import Store
from nakodo_dagster.store.duckdb_store import DuckDBStore, StoreLocked
from nakodo_dagster.store.models import (
    DEFAULT_ACCOUNT_ID,
    Account,
    AccountUsage,
    Campaign,
    CampaignAccount,
    CampaignLine,
    CampaignsRefused,
    ImportStatus,
    NewCampaign,
    PlaceName,
    ReleasePairs,
    Reservation,
    RollOut,
    ServedCampaigns,
    check_account_name,
    check_campaign_name,
    targeting_from_json,
    targeting_to_json,
)
from nakodo_dagster.store.postgres_store import PostgresStore, store_unreachable
from nakodo_dagster.store.search import RESULT_COLUMNS
from nakodo_dagster.store.shared import COMMIT_OVERLAP
from nakodo_dagster.store.transaction import Transaction

__all__ = [
    "COMMIT_OVERLAP",
    "DEFAULT_ACCOUNT_ID",
    "RESULT_COLUMNS",
    "Account",
    "AccountUsage",
    "Campaign",
    "CampaignAccount",
    "CampaignLine",
    "CampaignsRefused",
    "DuckDBStore",
    "ImportStatus",
    "NewCampaign",
    "PlaceName",
    "PostgresStore",
    "ReleasePairs",
    "Reservation",
    "RollOut",
    "ServedCampaigns",
    "Store",
    "StoreLocked",
    "Transaction",
    "check_account_name",
    "check_campaign_name",
    "open_store",
    "store_unreachable",
    "targeting_from_json",
    "targeting_to_json",
]


def open_store(url: str, *, lock_timeout: float = 60.0) -> Store:
    """The store a URL names: a DuckDB file path, or a ``postgresql://`` URL.

    ``lock_timeout`` is how many seconds a DuckDB store waits for another process to let go of the file.
    """
    allowed = "use a DuckDB file path (e.g. data/nakodo.duckdb) or a postgresql:// URL"
    if not isinstance(url, str) or not url.strip():
        raise InvalidInput(f"store {url!r} is not allowed: {allowed}")
    if url.startswith("postgresql://"):
        return PostgresStore(url)
    # A memory database would vanish between calls, since every call opens the file afresh.
    if "://" in url or url.startswith(":memory:"):
        raise InvalidInput(f"store {redacted_url(url)!r} is not allowed: {allowed}")
    return DuckDBStore(url, lock_timeout=lock_timeout)
