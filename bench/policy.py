"""The import sensor's policy work at scale, against PostgreSQL: what one tick costs for many big campaigns."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import numpy as np
import psycopg2

from nakodo_dagster.overture.sample import TAXONOMY
from nakodo_dagster.placement import PointLocation, Targeting, areas_for, campaigns_needs
from nakodo_dagster.store import PostgresStore


def _tick(store: PostgresStore, targetings: list[Targeting], now: datetime) -> dict:
    """One tick, as the import sensor does it: every area, the freshness rows, the needs, the reservation."""
    timings = {}
    started = time.perf_counter()
    categories = sorted({c for t in targetings for c in t.categories})
    every_area = {key for targeting in targetings for key in areas_for(targeting)}
    timings["areas_s"] = time.perf_counter() - started
    mark = time.perf_counter()
    rows = store.import_rows(every_area, categories)
    timings["import_rows_s"] = time.perf_counter() - mark
    mark = time.perf_counter()
    areas, needs = campaigns_needs(targetings, rows, now)
    timings["needs_s"] = time.perf_counter() - mark
    mark = time.perf_counter()
    reservation = store.reserve_runs(needs.missing, areas, now)
    timings["reserve_s"] = time.perf_counter() - mark
    timings["seconds"] = time.perf_counter() - started
    return timings | {
        "areas": len(every_area),
        "rows_read": len(rows),
        "missing_pairs": sum(len(c) for c in needs.missing.values()),
        "reserved_runs": len(reservation.runs),
    }


def measure_policy(admin_url: str, campaigns: int, radius_km: int, categories: int, seed: int = 0) -> dict:
    """Two ticks over ``campaigns`` campaigns in a fresh database: the first reserves everything, the next waits."""
    rng = np.random.default_rng(seed)
    names = [c.primary for c in TAXONOMY]
    targetings = [
        Targeting(
            (PointLocation(float(rng.uniform(-50, 65)), float(rng.uniform(-180, 180)), radius_km),),
            tuple(sorted(rng.choice(names, size=categories, replace=False).tolist())),
        )
        for _ in range(campaigns)
    ]
    database = f"nakodo_bench_{rng.integers(10**9)}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{database}"')
        parts = urlsplit(admin_url)
        store = PostgresStore(urlunsplit(parts._replace(path=f"/{database}")))
        store.migrate()
        now = datetime.now(UTC)
        first = _tick(store, targetings, now)
        again = _tick(store, targetings, now + timedelta(minutes=1))
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        admin.close()
    return {
        "campaigns": campaigns,
        "radius_km": radius_km,
        "categories_per_campaign": categories,
        "first_tick": first,
        "next_tick": again,
    }
