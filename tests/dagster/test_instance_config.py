"""The project's dagster.yaml, loaded by a real instance, is what keeps imports two at a time and drains the
queue without idle gaps."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.run_coordinator import SubmitRunContext
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon

from nakodo_dagster import tags
from nakodo_dagster.assets.campaign_search import CAMPAIGN_SEARCH
from nakodo_dagster.assets.places import IMPORT_POOL, PLACES, places
from nakodo_dagster.definitions import defs
from nakodo_dagster.jobs.import_places import import_places

DAGSTER_YAML = Path(__file__).parents[2] / "nakodo_dagster" / "data" / "dagster.yaml"


def test_the_project_instance_runs_two_imports_at_a_time():
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 2
        limits = config.run_queue_config.tag_concurrency_limits
        assert {"key": tags.KIND, "value": tags.IMPORT_KIND, "limit": 2} in limits
    assert import_places.tags[tags.KIND] == tags.IMPORT_KIND
    assert import_places.graph.node_defs[0].pool == IMPORT_POOL
    assert places.op.pool == IMPORT_POOL


def test_the_queue_launches_a_freed_slot_within_a_second():
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, dg.QueuedRunCoordinator)
        assert coordinator.dequeue_interval_seconds == 1
        assert coordinator.dequeue_use_threads
        assert coordinator.dequeue_num_workers == 2


def test_runs_of_places_by_hand_or_backfill_queue_as_imports_two_at_a_time():
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    asset_job = defs.resolve_implicit_global_asset_job_def()
    # Where the runs' code lives, as the webserver records it (the queue reads it; nothing is loaded from it here).
    location = InProcessCodeLocationOrigin(
        LoadableTargetOrigin(module_name="nakodo_dagster.definitions"), location_name="nakodo_dagster"
    )
    origin = RemoteJobOrigin(RemoteRepositoryOrigin(location, "__repository__"), asset_job.name)
    with dg.instance_for_test(overrides=settings) as instance:
        # Five runs of places as the UI's Materialize or a backfill submits them, and a search beside them.
        def run_of(asset: dg.AssetKey) -> str:
            created = instance.create_run_for_job(
                asset_job, asset_selection=frozenset({asset}), remote_job_origin=origin
            )
            return created.run_id

        by_hand = [run_of(PLACES) for _ in range(5)]
        search = run_of(CAMPAIGN_SEARCH)
        for run_id in [*by_hand, search]:
            # The queue's own step of DagsterInstance.submit_run (which first checks where the run's code lives).
            context = SubmitRunContext(instance.get_run_by_id(run_id), workspace=None)  # type: ignore[arg-type]
            instance.run_coordinator.submit_run(context)

        queued = [instance.get_run_by_id(run_id) for run_id in by_hand]
        assert {(run.status, run.tags.get(tags.KIND)) for run in queued} == {
            (dg.DagsterRunStatus.QUEUED, tags.IMPORT_KIND)
        }
        assert tags.KIND not in instance.get_run_by_id(search).tags
        # What the daemon's queue would start now: two imports, and the search, which no import limit holds.
        daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
        chosen = daemon._get_runs_to_dequeue(instance, instance.get_concurrency_config(), fixed_iteration_time=None)
        assert sorted(run.run_id in by_hand for run in chosen) == [False, True, True]
