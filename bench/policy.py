"""The import sensor's tick at scale: many big campaigns, the store in PostgreSQL, a real Dagster instance."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit, urlunsplit

import dagster as dg
import numpy as np
import psycopg2

from nakodo_dagster.overture.sample import TAXONOMY
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.resources import OvertureResource
from nakodo_dagster.sensors.import_sensor import StepClock, request_import_runs
from nakodo_dagster.store import PostgresStore

logger = logging.getLogger("bench.policy")


def _tick(instance: dg.DagsterInstance, store: PostgresStore, overture: OvertureResource, now: datetime) -> dict:
    """One tick of the import sensor, everything it does but hand its requests to the daemon."""
    clock = StepClock()
    campaigns = store.campaigns(active_only=True)
    clock.lap("campaigns")
    result = request_import_runs(instance, store, overture, campaigns, now, logger, clock)
    requests = result.run_requests if isinstance(result, dg.SensorResult) else []
    return {
        "seconds": clock.seconds,
        "steps": clock.steps,
        "runs_requested": len(requests),
        "pairs_reserved": sum(len(r.run_config["ops"]["import_block"]["config"]["pairs"]) for r in requests),
        "outcome": result.skip_message if isinstance(result, dg.SkipReason) else "run requests",
    }


def measure_policy(admin_url: str, overture_root: str, campaigns: int, radius_km: int, categories: int) -> dict:
    """Two ticks over ``campaigns`` campaigns in a fresh database: the first reserves everything, the next waits."""
    rng = np.random.default_rng(0)
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
        store = PostgresStore(urlunsplit(urlsplit(admin_url)._replace(path=f"/{database}")))
        store.migrate()
        for number, targeting in enumerate(targetings):
            store.add_campaign(f"campaign {number}", targeting)
        overture = OvertureResource(root=overture_root)
        now = datetime.now(UTC)
        with dg.instance_for_test() as instance:
            first = _tick(instance, store, overture, now)
            # Within the launch grace: the marks are on their way and no run is looked for yet.
            again = _tick(instance, store, overture, now + timedelta(minutes=1))
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
