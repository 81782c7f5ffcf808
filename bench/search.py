"""Case (d): a campaign's search over a million or more loaded places, in a DuckDB and a PostgreSQL store: its first
search (everything loaded is new to it) and its search with nothing new, through the store's incremental search."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import numpy as np
import psycopg2
import pyarrow as pa

from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.overture.sample import random_uuid_words, uuid_strings
from nakodo_dagster.placement import ImportRun, PointLocation, Targeting, areas_for, cell_containing
from nakodo_dagster.store import open_store

RELEASE = "2026-11-18.0"
# A 2 km point in the mid-Atlantic, where no bench place lies.
NOWHERE = PointLocation(0.0, -30.0, 2)
T = TypeVar("T")


def _places(areas: dict, categories: tuple[str, ...], count: int, rng: np.random.Generator) -> pa.Table:
    """``count`` places spread evenly over the areas' cells, in the reader's output schema."""
    keys = sorted(areas)
    west = np.array([areas[k].bbox[0] for k in keys])
    south = np.array([areas[k].bbox[1] for k in keys])
    which = rng.integers(0, len(keys), count)
    # Inside the cell, off its north and east edges, so that each place's cell is the one it is stored under.
    lat = south[which] + rng.uniform(0, 0.4999, count)
    lng = west[which] + rng.uniform(0, 0.4999, count)
    assert cell_containing(float(lat[0]), float(lng[0])).key == keys[which[0]]
    # Overture's ids: random UUIDs, whose first bytes already tell two apart when sorted.
    ids = uuid_strings(random_uuid_words(rng, count))
    return pa.table(
        {
            "id": ids,
            "name": np.char.add("Business ", np.arange(count).astype(str)),
            "category": np.array(categories)[rng.integers(0, len(categories), count)],
            "lat": lat,
            "lng": lng,
            "confidence": rng.uniform(0.5, 1.0, count),
            "address": pa.nulls(count, pa.string()),
            "country": pa.nulls(count, pa.string()),
            "websites": pa.nulls(count, pa.list_(pa.string())),
            "phones": pa.nulls(count, pa.list_(pa.string())),
            "area": np.array(keys)[which],
        },
        schema=PLACES_SCHEMA,
    )


def _timed(work: Callable[..., T], *args: object) -> tuple[float, T]:
    started = time.perf_counter()
    result = work(*args)
    return time.perf_counter() - started, result


def measure_search(
    database: str, places: int, lat: float, lng: float, radius_km: int, categories: tuple[str, ...], repeat: int
) -> dict:
    """Load ``places`` places for a campaign's areas into the empty store at ``database``, then ``repeat``
    campaigns of that targeting each search twice: first (everything is new to it), then with nothing new; then once
    more after a change of targeting (everything read again, nothing new). Medians, with every sample of the first
    two."""
    store = open_store(database)
    store.migrate()
    targeting = Targeting((PointLocation(lat, lng, radius_km),), categories)
    areas = areas_for(targeting)
    table = _places(areas, categories, places, np.random.default_rng(5))
    boxes = np.array([a.bbox for a in areas.values()])
    run = ImportRun(
        tuple(sorted(areas)),
        categories,
        (boxes[:, 0].min(), boxes[:, 1].min(), boxes[:, 2].max(), boxes[:, 3].max()),
        None,
        tuple((area, category) for area in sorted(areas) for category in categories),
    )
    now = datetime.now(UTC)
    load, _ = _timed(store.write_import, run, RELEASE, table, now)
    if "://" in database:
        # PostgreSQL's autovacuum analyses a table within a minute of a load this size; the searches follow at
        # once here, and without statistics the planner reads a million places through the primary key.
        with contextlib.closing(psycopg2.connect(database)) as connection, connection.cursor() as cursor:
            cursor.execute("ANALYZE places")
            connection.commit()
    first, again, rescan = [], [], []
    for number in range(repeat):
        campaign = store.add_campaign(f"bench {number}", targeting, now=now)
        # Searches begin after the import landed (imported_at = now), the second past its overlap margin.
        first.append(_timed(store.add_campaign_businesses, campaign, now + timedelta(minutes=1)))
        again.append(_timed(store.add_campaign_businesses, campaign, now + timedelta(minutes=3)))
        # A changed targeting makes the next search read everything loaded again; a far-away point adds no
        # place, so it finds nothing new: the first search's reading and measuring without its inserts.
        store.add_campaign_location(campaign, NOWHERE)
        rescan.append(_timed(store.add_campaign_businesses, campaign, now + timedelta(minutes=5)))
    return {
        "places_loaded": places,
        "areas": len(areas),
        "load_s": load,
        "first_search_s": statistics.median(seconds for seconds, _ in first),
        "first_search_samples_s": [seconds for seconds, _ in first],
        "first_search_added": first[0][1][0],
        "next_search_s": statistics.median(seconds for seconds, _ in again),
        "next_search_samples_s": [seconds for seconds, _ in again],
        "next_search_added": max(added for _, (added, _) in again),
        "rescan_s": statistics.median(seconds for seconds, _ in rescan),
        "rescan_added": max(added for _, (added, _) in rescan),
        "campaign_total": first[0][1][1],
    }
