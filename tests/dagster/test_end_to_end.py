"""Sensor ticks, the runs they ask for, the searches: checked against an independent reading of the release."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from overture_helpers import CURRENT as RELEASE

from bench.independent import campaign_businesses, expected_rows
from nakodo_dagster.assets.campaign_search import campaign_search
from nakodo_dagster.assets.places import PLACES_CHECKS
from nakodo_dagster.headless import register_partitions, sync
from nakodo_dagster.imports.events import NEW_RELEASE_WITHIN_DRIFT_GATE, PLACES
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job
from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.search import campaign_progress
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import search_sensor

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))
SWISS = Targeting((CountryLocation("CH"),), ("cafe",))


def independent_businesses(root: str, targeting: Targeting) -> tuple[set[str], set[str]]:
    """(ids surely in, ids near the edge) for a campaign, from pyarrow and WGS84 geodesics, not the project's SQL."""
    areas = areas_for(targeting)
    runs = import_runs({key: list(targeting.categories) for key in areas}, areas)
    return campaign_businesses([row for run in runs for row in expected_rows(Path(root), RELEASE, run)], targeting)


def assert_campaign_matches(store, campaign_id: int, root: str, targeting: Targeting) -> list[dict]:
    results = store.campaign_results(campaign_id)
    ids = [r["id"] for r in results]
    assert len(ids) == len(set(ids)), "each business once per campaign"
    inside, edge = independent_businesses(root, targeting)
    assert inside, "the sample release has businesses for this campaign"
    assert inside <= set(ids) <= inside | edge
    distances = [r["distance_km"] for r in results if r["distance_km"] is not None]
    assert distances == sorted(distances), "nearest first"
    return results


def test_ticks_runs_and_searches_give_each_campaign_its_businesses(instance, resources, release_root):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    swiss = store.add_campaign("Swiss", SWISS)

    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)
    for request in ticked.run_requests:
        run = import_places.execute_in_process(
            run_config=request.run_config, instance=instance, tags=request.tags, resources=resources
        )
        assert run.success

    pairs = {f"{a}|{c}" for t in (LEEDS, SWISS) for a in areas_for(t) for c in t.categories}
    assert set(instance.get_materialized_partitions(PLACES)) == pairs
    for spec in PLACES_CHECKS:
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key([spec.key]).get(spec.key)
        if spec.name == NEW_RELEASE_WITHIN_DRIFT_GATE:
            # A first import compares nothing.
            assert record is None
            continue
        assert record.status.value == "SUCCEEDED", spec.name
    imported = store.import_rows({a for t in (LEEDS, SWISS) for a in areas_for(t)}, ["cafe", "pub"])
    assert {(r.area, r.category) for r in imported if r.release == RELEASE} >= {tuple(p.split("|")) for p in pairs}

    searched = search_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, searched)
    [request] = searched.run_requests
    batch = search_campaigns_job.execute_in_process(
        run_config=request.run_config, instance=instance, resources=resources
    )
    assert {m.partition for m in batch.asset_materializations_for_node("search_due_campaigns")} == {
        f"{leeds}-leeds",
        f"{swiss}-swiss",
    }

    assert_campaign_matches(store, leeds, release_root, LEEDS)
    swiss_results = assert_campaign_matches(store, swiss, release_root, SWISS)
    assert {r["country"] for r in swiss_results} == {"CH"}, "a box around Switzerland holds Freiburg's cafes too"

    again = dg.materialize([campaign_search], partition_key=f"{leeds}-leeds", instance=instance, resources=resources)
    metadata = again.asset_materializations_for_node("campaign_search")[0].metadata
    assert metadata["businesses_added"].value == 0
    assert metadata["pending_areas"].value == 0


@pytest.mark.postgres
def test_headless_sync_on_a_dagster_instance_stored_in_postgres(postgres_url, duckdb_url, release_root):
    from nakodo_dagster.resources import OvertureResource, StoreResource

    store = StoreResource(database=duckdb_url)
    campaign = store.store.add_campaign("Leeds", LEEDS)
    overrides = {
        "storage": {"postgres": {"postgres_url": postgres_url.replace("postgresql://", "postgresql+psycopg2://")}}
    }
    with dg.instance_for_test(overrides=overrides) as instance:
        report = sync(instance, store, OvertureResource(root=release_root), campaign_id=campaign, wait_seconds=120)

        assert report.failed_runs == []
        assert report.pending == 0
        assert report.import_runs == len(import_runs({k: ["x"] for k in areas_for(LEEDS)}, areas_for(LEEDS)))
        assert set(instance.get_materialized_partitions(PLACES)) == {
            f"{a}|{c}" for a in areas_for(LEEDS) for c in LEEDS.categories
        }
    assert_campaign_matches(store.store, campaign, release_root, LEEDS)


def corrupt_release(tmp_path: Path) -> str:
    """A release whose only Parquet file is not Parquet at all: every read of it fails."""
    folder = tmp_path / "broken" / RELEASE / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    (folder / "part-00000.zstd.parquet").write_bytes(b"PAR1 this is not a parquet file")
    return str(tmp_path / "broken")


def test_a_failed_import_shows_failed_stops_the_wait_and_is_not_retried(instance, database_url, tmp_path):
    from nakodo_dagster.resources import OvertureResource, StoreResource

    resources = {
        "store": StoreResource(database=database_url),
        "overture": OvertureResource(root=corrupt_release(tmp_path)),
    }
    store = resources["store"].store
    campaign = store.add_campaign("Leeds", LEEDS)
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)

    outcomes = [
        import_places.execute_in_process(
            run_config=r.run_config, instance=instance, tags=r.tags, resources=resources, raise_on_error=False
        )
        for r in ticked.run_requests
    ]

    assert outcomes and not any(o.success for o in outcomes)
    assert all(instance.get_run_by_id(o.run_id).status == dg.DagsterRunStatus.FAILURE for o in outcomes)
    assert instance.get_materialized_partitions(PLACES) == set()
    progress = campaign_progress(store, store.campaign(campaign), None, datetime.now(UTC))
    assert progress.pending == 0, "nobody waits six hours on an import that already failed"
    assert set(progress.states.values()) == {"failed"}
    again = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert not again.run_requests, "a failed pair sits out its 7 days"
