"""Two stores sharing one Dagster instance (the worked example beside `make run`): the same work is per store, and a
sync waiting on imports launched elsewhere searches once, then watches the store."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg
import pytest

from nakodo_dagster import tags
from nakodo_dagster.headless import sync
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job
from nakodo_dagster.placement import PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.resources import StoreResource
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.store import open_store

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))
LEEDS_RUNS = len(import_runs({key: list(LEEDS.categories) for key in areas_for(LEEDS)}, areas_for(LEEDS)))


def tick(instance: dg.DagsterInstance, resources: dict) -> dg.SensorResult:
    return import_sensor(dg.build_sensor_context(instance=instance, resources=resources))


@pytest.fixture
def second(resources: dict, tmp_path) -> dict:
    """The same code location's resources on a second store (a DuckDB file of its own) and the same release."""
    return {**resources, "store": StoreResource(database=str(tmp_path / "second" / "store.duckdb"))}


def test_a_store_is_named_by_where_it_is_never_by_who_connects(tmp_path):
    here = open_store(str(tmp_path / "a.duckdb")).identity
    assert here == open_store(str(tmp_path / "." / "a.duckdb")).identity
    assert here != open_store(str(tmp_path / "b.duckdb")).identity
    alice = open_store("postgresql://alice:secret@db:5432/nakodo").identity
    assert alice == open_store("postgresql://bob:other@db:5432/nakodo").identity
    assert alice != open_store("postgresql://alice:secret@db:5432/staging").identity
    assert "secret" not in alice and len(alice) == 16


def test_two_stores_on_one_instance_never_drop_each_others_runs(instance, resources, second):
    for store in (resources["store"], second["store"]):
        store.store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    for request in first.run_requests:
        instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)

    other = tick(instance, second)

    # The same payloads, queued for the first store: the second store's are other work, and all are asked for.
    assert len(other.run_requests) == len(first.run_requests) == LEEDS_RUNS
    keys = {r.tags[tags.IMPORT_KEY] for r in first.run_requests}
    assert {r.tags[tags.IMPORT_KEY] for r in other.run_requests} == keys
    assert {r.tags[tags.STORE] for r in other.run_requests} == {second["store"].store.identity}
    assert {r.tags[tags.STORE] for r in first.run_requests} == {resources["store"].store.identity}


def test_a_sync_beside_another_stores_queued_runs_imports_its_own(instance, resources, second):
    for store in (resources["store"], second["store"]):
        store.store.add_campaign("Leeds", LEEDS)
    for request in tick(instance, resources).run_requests:
        instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)

    report = sync(instance, second["store"], second["overture"], wait_seconds=60)

    assert report.failed_runs == []
    assert report.import_runs == LEEDS_RUNS
    assert report.pending == 0


def test_a_sync_waiting_on_imports_launched_elsewhere_searches_once(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    # The daemon's tick asked for every block; its runs are queued and do not start while the sync waits.
    for request in tick(instance, resources).run_requests:
        instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    began = datetime.now(UTC)

    report = sync(instance, resources["store"], resources["overture"], wait_seconds=7)

    assert report.import_runs == 0
    assert report.pending == len(areas_for(LEEDS))
    assert report.searches == 1
    searches = instance.get_run_records(dg.RunsFilter(job_name=search_campaigns_job.name, created_after=began))
    assert len(searches) == 1


def test_a_sync_whose_own_imports_landed_searches_once_while_it_waits_on_the_rest(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    # Leeds' blocks are queued elsewhere and do not start; Paris' are the sync's own, and land at once.
    for request in tick(instance, resources).run_requests:
        instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    store.add_campaign("Paris", Targeting((PointLocation(48.8566, 2.3522, 5),), ("cafe",)))
    began = datetime.now(UTC)

    report = sync(instance, resources["store"], resources["overture"], wait_seconds=8)

    assert report.import_runs >= 1 and report.failed_runs == []
    assert report.pending == len(areas_for(LEEDS))
    searches = instance.get_run_records(dg.RunsFilter(job_name=search_campaigns_job.name, created_after=began))
    assert len(searches) == 1, "the landing within the last minute is read once, not at every poll"
