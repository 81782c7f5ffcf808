"""Both sensors at scale, evaluated as Dagster evaluates them: the real sensor definitions on a real instance, their
resources pointed at a store of many big campaigns (PostgreSQL or DuckDB), each run they ask for created in the
instance as the daemon would, so that the next tick sees the queue as it would be."""

from __future__ import annotations

import logging
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dagster as dg
import numpy as np
import psycopg2

from nakodo_dagster.assets.coverage import places_coverage_sensor
from nakodo_dagster.dagster_internals import RUN_KEY_TAG, SensorExecutionData
from nakodo_dagster.definitions import defs
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.jobs.search_campaigns import searched_campaign_ids
from nakodo_dagster.overture.sample import TAXONOMY
from nakodo_dagster.partitions import apply_partitions_requests
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import search_sensor
from nakodo_dagster.store import COMMIT_OVERLAP, open_store

SENSORS = {"import": import_sensor, "search": search_sensor, "coverage": places_coverage_sensor}
# The big campaign has 5 categories (and 200 km, which callers pass).
CATEGORIES_PER_CAMPAIGN = 5
# The daemon evaluates the search sensor at most this often.
TICK_INTERVAL_S = search_sensor.minimum_interval_seconds
# What StepClock prints into a tick's log line or skip message: "Tick 1.23 s (orphans 0.01 s, queue 0.20 s)".
_TICK_LINE = re.compile(r"Tick (?P<seconds>\d+\.\d+) s \((?P<steps>[^)]*)\)")
_STEP = re.compile(r"(?P<name>.+) (?P<seconds>\d+\.\d+) s")


def targetings(count: int, radius_km: int, categories: int, seed: int = 0) -> list[Targeting]:
    """``count`` campaigns of one point each, anywhere between 50 S and 65 N, with ``categories`` random categories:
    the same campaigns for every backend and every run of the bench."""
    rng = np.random.default_rng(seed)
    names = [c.primary for c in TAXONOMY]
    return [
        Targeting(
            (PointLocation(float(rng.uniform(-50, 65)), float(rng.uniform(-180, 180)), radius_km),),
            tuple(sorted(rng.choice(names, size=categories, replace=False).tolist())),
        )
        for _ in range(count)
    ]


@contextmanager
def scratch_database(backend: str, admin_url: str, folder: Path, template: str | None = None) -> Iterator[str]:
    """A fresh, empty store's address (``postgres``: a database of its own on the admin URL's server, a copy of
    ``template`` if named; ``duckdb``: a file in ``folder``), gone afterwards."""
    if backend == "duckdb":
        # A folder of its own: the store file and whatever DuckDB writes beside it go with it.
        with tempfile.TemporaryDirectory(dir=folder) as scratch:
            yield str(Path(scratch) / "store.duckdb")
        return
    name = f"nakodo_bench_{time.time_ns()}"
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"' + (f' TEMPLATE "{template}"' if template else ""))
        yield urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))
    finally:
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


def seed_campaigns(database: str, campaigns: list[Targeting]) -> float:
    """Create the campaigns through the store, as users do (each keeps its areas); returns the seconds taken."""
    started = time.perf_counter()
    store = open_store(database)
    store.migrate()
    for number, targeting in enumerate(campaigns):
        store.add_campaign(f"campaign {number}", targeting)
    return time.perf_counter() - started


def analyze(database: str) -> None:
    """Bring the planner's statistics up to date, as autovacuum has in a database that grew over weeks: a copy
    or a bulk seeding has none of the tables' real sizes, and PostgreSQL then picks plans for tables a thousand
    times smaller."""
    connection = psycopg2.connect(database)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    finally:
        connection.close()


def kept_template(admin_url: str, name: str, seed: Callable[[str], object]) -> tuple[str, float | None]:
    """A PostgreSQL database ``name``, filled once by ``seed(url)`` and kept between bench runs: seeding thousands
    of campaigns through the store takes minutes. Returns its name and the seconds seeding took, or None if it was
    already there. Copies are migrated to the newest schema as any older store is."""
    admin = psycopg2.connect(admin_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
            if cursor.fetchone():
                return name, None
            # Seeded under another name and renamed when whole: an interrupted seeding leaves no template.
            seeding = f"{name}_seeding"
            cursor.execute(f'DROP DATABASE IF EXISTS "{seeding}"')
            cursor.execute(f'CREATE DATABASE "{seeding}"')
            started = time.perf_counter()
            seed(urlunsplit(urlsplit(admin_url)._replace(path=f"/{seeding}")))
            seconds = time.perf_counter() - started
            cursor.execute(f'ALTER DATABASE "{seeding}" RENAME TO "{name}"')
            return name, seconds
    finally:
        admin.close()


def seeded_template(admin_url: str, campaigns: int, radius_km: int) -> tuple[str, float | None]:
    """``kept_template`` of ``campaigns`` campaigns of ``targetings`` (seed 0): seeding 100,000 takes about an hour."""
    return kept_template(
        admin_url,
        f"nakodo_bench_seeded_{campaigns}_{radius_km}km_{CATEGORIES_PER_CAMPAIGN}",
        lambda url: seed_campaigns(url, targetings(campaigns, radius_km, CATEGORIES_PER_CAMPAIGN)),
    )


class _Lines(logging.Handler):
    """Keeps what a tick logs: the import sensor's log line names its steps."""

    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def tick_steps(texts: list[str]) -> dict[str, float]:
    """The steps a StepClock line among ``texts`` names, in seconds; empty if the sensor printed none."""
    for text in texts:
        found = _TICK_LINE.search(text)
        if found:
            steps = (_STEP.fullmatch(step.strip()) for step in found["steps"].split(","))
            return {step["name"]: float(step["seconds"]) for step in steps if step}
    return {}


def evaluate(
    sensor: dg.SensorDefinition, instance: dg.DagsterInstance, resources: dict, cursor: str | None
) -> tuple[dict, SensorExecutionData]:
    """One tick as the code server evaluates it (``evaluate_tick``: resources set up, requests resolved), timed
    whole; its figures and what it returned."""
    with dg.build_sensor_context(
        instance=instance, resources=resources, cursor=cursor, definitions=defs, sensor_name=sensor.name
    ) as context:
        lines = _Lines()
        context.log.addHandler(lines)
        started = time.perf_counter()
        data = sensor.evaluate_tick(context)
        seconds = time.perf_counter() - started
    requests = data.run_requests or []
    figures = {
        "seconds": seconds,
        "runs_requested": len(requests),
        "skip_message": data.skip_message,
        "steps": tick_steps([data.skip_message or "", *lines.messages]),
        "log": lines.messages,
    }
    if sensor is import_sensor:
        # Each import run carries the pairs it reserved.
        figures["pairs_reserved"] = sum(len(import_payload(r.run_config)["pairs"]) for r in requests)
    return figures, data


def launch(instance: dg.DagsterInstance, sensor: dg.SensorDefinition, data: SensorExecutionData) -> None:
    """What the daemon does with a tick's result: register its partitions and create its runs, the job's tags
    under the request's. The runs are left NOT_STARTED: queued or running, as far as the next tick can tell."""
    apply_partitions_requests(instance, data.dynamic_partitions_requests or [])
    if not data.run_requests:
        # The coverage sensor has no job: it only records check results.
        return
    # The sensor's own jobs, not the definitions' copies: those bind resources to environment variables.
    jobs = {job.name: job for job in sensor.jobs}
    for request in data.run_requests:
        job = jobs[request.job_name]
        instance.create_run_for_job(
            job,
            run_config=request.run_config,
            tags={**job.run_tags, **request.tags, **({RUN_KEY_TAG: request.run_key} if request.run_key else {})},
            asset_selection=set(request.asset_selection) if request.asset_selection else None,
        )


def _median_tick(samples: list[dict]) -> dict:
    """The sample of median total time, with every sample's seconds beside it."""
    ordered = sorted(samples, key=lambda sample: sample["seconds"])
    return ordered[(len(ordered) - 1) // 2] | {
        "seconds": statistics.median(s["seconds"] for s in samples),
        "samples_s": [s["seconds"] for s in samples],
    }


def measure_ticks(
    backend: str, admin_url: str, folder: Path, overture_root: str, campaigns: int, radius_km: int, repeat: int
) -> dict:
    """Seed ``campaigns`` campaigns of ``radius_km`` km, then each sensor's first tick and
    ``repeat`` next ticks (the median is kept), the runs each tick asks for created in between."""
    template, seeding = seeded_template(admin_url, campaigns, radius_km) if backend == "postgres" else (None, None)
    seeded = time.monotonic()
    with scratch_database(backend, admin_url, folder, template) as database, dg.instance_for_test() as instance:
        if template is None:
            seeding = seed_campaigns(database, targetings(campaigns, radius_km, CATEGORIES_PER_CAMPAIGN))
            seeded = time.monotonic()
        if seeding is not None:
            # A tick looks again at what changed up to COMMIT_OVERLAP before its previous one, so every tick within
            # that minute of a seeding recounts every campaign's pairs (5 to 6 s at 10,000 campaigns). The ticks are
            # measured on a store whose campaigns were added before then, as a template's are.
            time.sleep(max(0.0, COMMIT_OVERLAP.total_seconds() - (time.monotonic() - seeded)))
        # A template seeded by an older schema is migrated here, as a user's store would be, before the first tick.
        started = time.perf_counter()
        open_store(database).migrate()
        migrating = time.perf_counter() - started
        if backend == "postgres":
            analyze(database)
        resources = {"store": StoreResource(database=database), "overture": OvertureResource(root=overture_root)}
        ticks: dict[str, dict] = {}
        cursors: dict[str, str | None] = dict.fromkeys(SENSORS)
        # The import sensor first: a new campaign's search finds its imports already asked for, as it mostly would.
        for tick in ("first", "next"):
            for name, sensor in SENSORS.items():
                samples = []
                try:
                    for _ in range(1 if tick == "first" else repeat):
                        figures, data = evaluate(sensor, instance, resources, cursors[name])
                        launch(instance, sensor, data)
                        cursors[name] = data.cursor
                        samples.append(figures)
                except Exception as error:
                    # A tick that raises is a failed tick in the daemon too: a figure, not the end of the bench.
                    ticks[f"{name}_{tick}"] = {"error": f"{type(error).__name__}: {error}"}
                    continue
                ticks[f"{name}_{tick}"] = _median_tick(samples)
    return {
        "backend": backend,
        "campaigns": campaigns,
        "radius_km": radius_km,
        "categories_per_campaign": CATEGORIES_PER_CAMPAIGN,
        "seeding_s": seeding,
        "migrate_s": migrating,
        "ticks": ticks,
    }


def _batch_campaigns(data: SensorExecutionData) -> list[int]:
    """The campaigns the tick's search runs name (search_run_config's shape)."""
    return [campaign for request in data.run_requests or [] for campaign in searched_campaign_ids(request.run_config)]


def measure_search_pace(
    admin_url: str, folder: Path, overture_root: str, campaigns: list[int], radius_km: int, minutes: float
) -> dict:
    """The search sensor every TICK_INTERVAL_S of real time for ``minutes``, over stores of ``campaigns`` pending
    campaigns each (nothing loaded, imports on), ticked side by side; the runs it asks for after its first tick,
    scaled to an hour.

    The sensor reads the clock itself (no ``now`` to pass), so time is real. Between ticks each asked-for batch is
    searched as its run does first (the store's search of every campaign it names, at that moment), so the next
    tick sees the searches done, as it would with runs that finish within a tick.
    """
    ticks = int(minutes * 60 // TICK_INTERVAL_S) + 1
    with ExitStack() as stack:
        scales = []
        for count in campaigns:
            database = stack.enter_context(scratch_database("postgres", admin_url, folder))
            seed_campaigns(database, targetings(count, radius_km, CATEGORIES_PER_CAMPAIGN))
            resources = {"store": StoreResource(database=database), "overture": OvertureResource(root=overture_root)}
            scales.append((count, open_store(database), resources, stack.enter_context(dg.instance_for_test())))
        cursors: dict[int, str | None] = dict.fromkeys(campaigns)
        runs: dict[int, list[int]] = {count: [] for count in campaigns}
        searched: dict[int, list[int]] = {count: [] for count in campaigns}
        errors: dict[int, str] = {}
        started = time.monotonic()
        for number in range(ticks):
            time.sleep(max(0.0, started + number * TICK_INTERVAL_S - time.monotonic()))
            for count, store, resources, instance in scales:
                if count in errors:
                    continue
                try:
                    _, data = evaluate(search_sensor, instance, resources, cursors[count])
                except Exception as error:
                    # As in measure_ticks: the failure is the figure; the other scales tick on.
                    errors[count] = f"tick {number + 1}: {type(error).__name__}: {error}"
                    continue
                launch(instance, search_sensor, data)
                cursors[count] = data.cursor
                batch = _batch_campaigns(data)
                for campaign in batch:
                    store.add_campaign_businesses(campaign, datetime.now(UTC))
                runs[count].append(len(data.run_requests or []))
                searched[count].append(len(batch))
    # The first tick starts every campaign's day at once; the rate is that of the ticks after it.
    steady_s = (ticks - 1) * TICK_INTERVAL_S
    return {
        "tick_interval_s": TICK_INTERVAL_S,
        "ticks": ticks,
        "window_s": ticks * TICK_INTERVAL_S,
        "radius_km": radius_km,
        "scales": [
            {
                "campaigns": count,
                "runs_per_tick": runs[count],
                "campaigns_per_tick": searched[count],
                "runs": sum(runs[count]),
                "runs_per_hour": sum(runs[count][1:]) * 3600 / steady_s,
                "searches_per_hour": sum(searched[count][1:]) * 3600 / steady_s,
            }
            | ({"error": errors[count]} if count in errors else {})
            for count in campaigns
        ],
    }
