"""The import sensor on a real Dagster instance and a real store (both backends)."""

from __future__ import annotations

from datetime import datetime

import dagster as dg
import pytest

from nakodo_dagster.assets.places import IMPORT_KEY_TAG, import_places
from nakodo_dagster.placement import REQUESTED, ImportRun, PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.sensors import import_sensor as import_sensor_module
from nakodo_dagster.sensors.import_sensor import import_sensor

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))


def tick(instance: dg.DagsterInstance, resources: dict) -> dg.SensorResult | dg.SkipReason:
    return import_sensor(dg.build_sensor_context(instance=instance, resources=resources))


def marks(resources: dict) -> set[tuple[str, str]]:
    store = resources["store"].store
    areas = areas_for(LEEDS)
    return {(r.area, r.category) for r in store.import_rows(areas, LEEDS.categories) if r.release == REQUESTED}


def test_no_active_campaign_means_no_run(instance, resources):
    result = tick(instance, resources)
    assert isinstance(result, dg.SkipReason)
    assert "No active campaign" in result.skip_message


def test_a_campaign_gets_one_run_per_block_and_its_partitions(instance, resources):
    resources["store"].store.add_campaign("Leeds", LEEDS)
    areas = areas_for(LEEDS)
    expected = import_runs({key: list(LEEDS.categories) for key in areas}, areas)

    result = tick(instance, resources)

    assert isinstance(result, dg.SensorResult)
    payloads = [r.run_config["ops"]["import_block"]["config"] for r in result.run_requests]
    assert sorted(ImportRun.from_payload(p).key for p in payloads) == sorted(run.key for run in expected)
    assert all(
        r.tags[IMPORT_KEY_TAG] == ImportRun.from_payload(r.run_config["ops"]["import_block"]["config"]).key
        for r in result.run_requests
    )
    assert marks(resources) == {(a, c) for a in areas for c in LEEDS.categories}
    added = {request.partitions_def_name: set(request.partition_keys) for request in result.dynamic_partitions_requests}
    assert added == {"area": set(areas), "category": set(LEEDS.categories)}


def test_the_next_tick_waits_instead_of_asking_again(instance, resources):
    resources["store"].store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    assert first.run_requests

    second = tick(instance, resources)

    assert isinstance(second, dg.SkipReason)
    assert f"{len(areas_for(LEEDS))} areas have an import on its way" in second.skip_message


def test_imports_off_writes_no_mark_and_says_why(instance, resources_off):
    resources_off["store"].store.add_campaign("Leeds", LEEDS)

    result = tick(instance, resources_off)

    assert isinstance(result, dg.SkipReason)
    assert f"{len(areas_for(LEEDS))} areas of business listings not loaded" in result.skip_message
    assert "NAKODO_OVERTURE_ROOT isn't set" in result.skip_message
    assert marks(resources_off) == set()


def test_a_failure_after_reserving_takes_the_marks_back_and_fails_the_tick(instance, resources, monkeypatch):
    resources["store"].store.add_campaign("Leeds", LEEDS)

    def broken(run, stamp):
        raise RuntimeError("the run request could not be built")

    monkeypatch.setattr(import_sensor_module, "_run_request", broken)
    with pytest.raises(RuntimeError, match="could not be built"):
        tick(instance, resources)
    assert marks(resources) == set()

    monkeypatch.undo()
    assert tick(instance, resources).run_requests, "the next tick asks again"


def test_identical_work_is_not_launched_twice_within_two_hours(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    request = first.run_requests[0]
    instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    # Someone cleared the marks (say, by hand): the same payload is reservable again.
    stamp = datetime.fromisoformat(request.tags["nakodo/stamp"])
    every_pair = [tuple(p) for r in first.run_requests for p in r.run_config["ops"]["import_block"]["config"]["pairs"]]
    store.take_back(every_pair, stamp)

    second = tick(instance, resources)

    keys = {r.tags[IMPORT_KEY_TAG] for r in second.run_requests}
    assert request.tags[IMPORT_KEY_TAG] not in keys
    assert len(second.run_requests) == len(first.run_requests) - 1
    skipped = {tuple(p) for p in request.run_config["ops"]["import_block"]["config"]["pairs"]}
    assert not skipped & marks(resources), "the skipped run's marks are not kept"


def test_only_new_partitions_are_registered(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    for request in tick(instance, resources).dynamic_partitions_requests:
        instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
    store.add_campaign("Leeds bakeries", Targeting(LEEDS.locations, ("bakery",)))

    result = tick(instance, resources)

    added = {request.partitions_def_name: set(request.partition_keys) for request in result.dynamic_partitions_requests}
    assert added == {"category": {"bakery"}}
    assert {
        tuple(p)[1] for r in result.run_requests for p in r.run_config["ops"]["import_block"]["config"]["pairs"]
    } == {"bakery"}


def test_a_root_without_releases_fails_the_tick_before_reserving(instance, database_url, tmp_path):
    from nakodo_dagster.errors import InvalidInput
    from nakodo_dagster.resources import OvertureResource, StoreResource

    resources = {"store": StoreResource(database=database_url), "overture": OvertureResource(root=str(tmp_path))}
    resources["store"].store.add_campaign("Leeds", LEEDS)

    with pytest.raises(InvalidInput, match="no release"):
        tick(instance, resources)
    assert marks(resources) == set(), "a missing release must not block every pair for 7 days"
