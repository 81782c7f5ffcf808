"""Case (d): one campaign's search over a million or more loaded places, in the default DuckDB store."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa

from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.placement import ImportRun, PointLocation, Targeting, areas_for, cell_containing
from nakodo_dagster.store import open_store

RELEASE = "2026-11-18.0"


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
    ids = np.char.add("bench-", np.arange(count).astype(str))
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


def measure_search(
    folder: Path, places: int, lat: float, lng: float, radius_km: int, categories: tuple[str, ...]
) -> dict:
    """Load ``places`` places for a campaign's areas, then time its first search and the next one."""
    path = folder / "search.duckdb"
    path.unlink(missing_ok=True)
    store = open_store(str(path))
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
    started = time.perf_counter()
    store.write_import(run, RELEASE, table, now)
    load = time.perf_counter() - started
    campaign = store.add_campaign("bench", targeting, now=now)
    started = time.perf_counter()
    added, total = store.add_campaign_businesses(campaign, now + timedelta(minutes=1))
    first = time.perf_counter() - started
    started = time.perf_counter()
    added_again, _ = store.add_campaign_businesses(campaign, now + timedelta(minutes=3))
    again = time.perf_counter() - started
    path.unlink()
    return {
        "places_loaded": places,
        "areas": len(areas),
        "load_s": load,
        "first_search_s": first,
        "first_search_added": added,
        "next_search_s": again,
        "next_search_added": added_again,
        "campaign_total": total,
    }
