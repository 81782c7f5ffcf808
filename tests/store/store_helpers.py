"""Small builders the store tests share: times, runs, places tables, and a look straight into the tables."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest

from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.placement import ImportRun, Needs, import_runs
from nakodo_dagster.store import Store, Transaction, landing, marks, migrate, needs, open_store, progress
from nakodo_dagster.store import imports as store_imports
from nakodo_dagster.store import search as store_search
from nakodo_dagster.store.models import SearchProgress
from nakodo_dagster.store.schema import MIGRATIONS
from nakodo_dagster.store.shared import PAIRS, campaign_filter
from nakodo_dagster.store.transaction import by_area, pair_params

NOW = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
RELEASE = "2026-11-18.0"


def run_for(pairs: Iterable[tuple[str, str]]) -> ImportRun:
    """The one run import_runs makes of these pairs (one block or one country), as the sensor would launch it."""
    missing: dict[str, list[str]] = {}
    for area, category in sorted(set(pairs)):
        missing.setdefault(area, []).append(category)
    (run,) = import_runs(missing, {})
    return run


def places_table(rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Places as the reader hands them: websites and phones as lists, address as one line."""
    defaults = {"name": None, "confidence": 0.9, "address": None, "country": "GB", "websites": [], "phones": []}
    full = [{**defaults, **row} for row in rows]
    return pa.Table.from_pylist(full, schema=PLACES_SCHEMA)


def record_release(store: Store, pairs: Iterable[tuple[str, str]], at: datetime, release: str = RELEASE) -> None:
    """place_imports says these pairs were loaded (with no places) at ``at``."""
    store.write_import(run_for(pairs), release, places_table([]), at)


def store_at_version(database_url: str, version: int) -> Store:
    """A new store migrated up to ``version`` only, as an older release of the project left it; its ``migrate()``
    then upgrades it as a user's store is upgraded."""
    store = open_store(database_url)
    with pytest.MonkeyPatch.context() as before:
        before.setattr(migrate, "MIGRATIONS", tuple(m for m in MIGRATIONS if m[0] <= version))
        store.migrate()
    return store


@contextmanager
def writing_before_version_13() -> Iterator[None]:
    """Campaigns written as a release before version 13 wrote them: without the note for the progress count,
    whose table came with that version."""
    with pytest.MonkeyPatch.context() as before:
        before.setattr(progress, "note_due", lambda tx, campaign_ids: None)
        yield


# How a release before version 17 recorded an import: without the release its places came from.
_RECORD_IMPORTS_BEFORE_VERSION_17 = f"""
INSERT INTO place_imports (area, category, release, rows, imported_at)
SELECT pair.area, pair.category, $release, count(i.id), $now
FROM {PAIRS} AS pair
LEFT JOIN incoming_places AS i ON i.area = pair.area AND i.category = pair.category
GROUP BY pair.area, pair.category
ORDER BY pair.area, pair.category
ON CONFLICT (area, category) DO UPDATE
SET release = excluded.release, rows = excluded.rows, imported_at = excluded.imported_at, failure = NULL
RETURNING area, category, rows
"""


# How a release before version 19 put an import's rows in places: without their source records.
_INSERT_PLACES_BEFORE_VERSION_19 = f"""
INSERT INTO places (area, category, id, name, lat, lng, confidence, address, country, websites, phones, release)
SELECT i.area, i.category, i.id, i.name, i.lat, i.lng, i.confidence, i.address, i.country, i.websites, i.phones,
       $release
FROM incoming_places AS i JOIN {PAIRS} AS pair ON pair.area = i.area AND pair.category = i.category
"""


def _land_before_version_15(tx: Transaction, pairs: dict[str, list[str]], release: str, now: datetime) -> None:
    tx.run(landing.DELETE_PLACES, **pairs)
    tx.run(_INSERT_PLACES_BEFORE_VERSION_19, **pairs, release=release)


@contextmanager
def writing_before_version_15() -> Iterator[None]:
    """Imports written as a release before version 15 wrote them: without clearing what the drift gate held, whose
    tables came with that version, nor the release their places came from (version 17), nor what changed about
    their ids (version 18), nor their source records (version 19)."""
    with pytest.MonkeyPatch.context() as before:
        before.setattr(landing, "land", _land_before_version_15)
        before.setattr(store_imports, "RECORD_IMPORTS", _RECORD_IMPORTS_BEFORE_VERSION_17)
        yield


@contextmanager
def reading_before_version_18() -> Iterator[None]:
    """A campaign's results read as a release before version 18 read them: without removed_in nor closed_in (None
    here)."""
    with pytest.MonkeyPatch.context() as before:
        before.setattr(
            store_search,
            "CAMPAIGN_RESULTS",
            store_search.CAMPAIGN_RESULTS.replace(
                ", removed_in, closed_in FROM",
                ", CAST(NULL AS TEXT) AS removed_in, CAST(NULL AS TEXT) AS closed_in FROM",
            ),
        )
        yield


def reserve_pairs(
    store: Store, missing: Mapping[str, Iterable[str]], stamp: datetime, now: datetime
) -> dict[str, list[str]]:
    """Mark these pairs as requested where nobody else has, in the store's compare and set (``marks.mark``, as a
    reservation does); the pairs returned are ours to import."""
    params = pair_params((area, category) for area, categories in missing.items() for category in categories)
    if not params["areas"]:
        return {}
    return by_area(store._transact(lambda tx: marks.mark(tx, params, stamp, now, force=False)))


def needs_of(store: Store, now: datetime, campaign_ids: Sequence[int] | None = None) -> Needs:
    """``placement.import_needs`` of the campaigns' pairs merged, computed by the database."""
    chosen = campaign_filter(campaign_ids)
    return store._transact(lambda tx: needs.needs(tx, now, chosen))


def kept_progress(store: Store) -> list[SearchProgress]:
    """Every active campaign's progress as last kept (``Store.count_progress``): what ``Store.search_progress``
    computes from the campaigns' pairs, as of that count."""
    return store._transact(progress.kept)


def schema_version(store: Store) -> int:
    """The newest migration the store's database has applied."""
    return store._transact(migrate.schema_version)


def query(store: Store, sql: str, **params: Any) -> list[tuple]:
    """Rows of a statement run straight on the store's database, for looking at what was written."""
    return store._transact(lambda tx: tx.rows(sql, **params))


def place_ids(store: Store, area: str, category: str) -> set[str]:
    rows = query(
        store, "SELECT id FROM places WHERE area = $area AND category = $category", area=area, category=category
    )
    return {row[0] for row in rows}


def imports_table(store: Store) -> dict[tuple[str, str], tuple[str, int, datetime]]:
    """place_imports as a dict: (area, category) -> (release, rows, imported_at)."""
    rows = query(store, "SELECT area, category, release, rows, imported_at FROM place_imports")
    return {(a, c): (release, n, at) for a, c, release, n, at in rows}


def count_places(store: Store, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
    """How many places are loaded for each of these pairs (pairs with none are left out)."""
    rows = query(
        store,
        f"""
        SELECT places.area, places.category, count(*)
        FROM places JOIN {PAIRS} AS pair ON places.area = pair.area AND places.category = pair.category
        GROUP BY places.area, places.category
        """,
        **pair_params(pairs),
    )
    return {(area, category): count for area, category, count in rows}
