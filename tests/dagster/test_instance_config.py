"""The project's dagster.yaml, loaded by a real instance, is what keeps imports two at a time and drains the
queue without idle gaps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import time_machine
import yaml
from dagster_helpers import look_as_the_daemon_does

from nakodo_dagster import tags
from nakodo_dagster.assets.places import places
from nakodo_dagster.dagster_internals import (
    EmptyWorkspaceTarget,
    InProcessCodeLocationOrigin,
    LoadableTargetOrigin,
    MonitoringDaemon,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
    WorkspaceProcessContext,
    runs_the_queue_starts,
)
from nakodo_dagster.definitions import defs
from nakodo_dagster.imports.events import IMPORT_POOL, PLACES
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.launcher import KILL_GRACE_SECONDS
from nakodo_dagster.search import CAMPAIGN_SEARCH

PROJECT = Path(__file__).parents[2]
DAGSTER_YAML = PROJECT / "nakodo_dagster" / "data" / "dagster.yaml"
PRODUCTION_YAML = PROJECT / "deploy" / "production" / "dagster.yaml"
# What Kubernetes gives a pod asked to stop before it kills it (terminationGracePeriodSeconds' default).
POD_GRACE_SECONDS = 30


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


def _queue_and_limits(path: Path) -> dict:
    """A dagster.yaml's settings but its storage, run launcher and compute logs: the test instance's own serve."""
    settings = yaml.safe_load(path.read_text())
    return {key: value for key, value in settings.items() if key not in ("storage", "run_launcher", "compute_logs")}


@pytest.mark.parametrize("path", [DAGSTER_YAML, PRODUCTION_YAML], ids=["embedded", "production"])
def test_runs_of_places_by_hand_or_backfill_queue_as_imports_two_at_a_time(path):
    settings = _queue_and_limits(path)
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
            context = dg.SubmitRunContext(instance.get_run_by_id(run_id), workspace=None)  # type: ignore[arg-type]
            instance.run_coordinator.submit_run(context)

        queued = [instance.get_run_by_id(run_id) for run_id in by_hand]
        assert {(run.status, run.tags.get(tags.KIND)) for run in queued} == {
            (dg.DagsterRunStatus.QUEUED, tags.IMPORT_KIND)
        }
        assert tags.KIND not in instance.get_run_by_id(search).tags
        # What the daemon's queue would start now: two imports, and the search, which no import limit holds.
        chosen = runs_the_queue_starts(instance)
        assert sorted(run.run_id in by_hand for run in chosen) == [False, True, True]


def _queue_and_monitoring(path: Path) -> dict:
    """The sections of a dagster.yaml that decide how runs queue, hold pool slots, are watched and are retried."""
    settings = yaml.safe_load(path.read_text())
    return {key: settings[key] for key in ("concurrency", "run_monitoring", "run_retries") if key in settings}


@dg.op(pool=IMPORT_POOL)
def _reads() -> None:
    """Stands for an import's step: what holds a slot is the run, whatever its op."""


@dg.job
def _import_like() -> None:
    _reads()


def _monitor(instance: dg.DagsterInstance) -> None:
    """One iteration of the daemon's run monitoring, which also frees the slots of runs that ended."""
    with WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as context:
        look_as_the_daemon_does(MonitoringDaemon(interval_seconds=30), context)


@pytest.mark.parametrize("path", [DAGSTER_YAML, PRODUCTION_YAML], ids=["embedded", "production"])
def test_a_run_that_ended_holding_an_import_slot_gives_it_back(path):
    with dg.instance_for_test(overrides=_queue_and_monitoring(path)) as instance:
        storage = instance.event_log_storage
        # As a run's first step does: the pool takes the instance's default limit (two).
        assert storage.initialize_concurrency_limit_to_default(IMPORT_POOL)
        # Two imports whose workers were killed mid-step: each holds a slot it will never give back itself.
        killed = [instance.create_run_for_job(_import_like) for _ in range(2)]
        for run in killed:
            assert storage.claim_concurrency_slot(IMPORT_POOL, run.run_id, "_reads").is_claimed
        waiting = instance.create_run_for_job(_import_like)
        assert not storage.claim_concurrency_slot(IMPORT_POOL, waiting.run_id, "_reads").is_claimed
        for run in killed:
            instance.report_run_failed(run, "the run's worker is gone")

        _monitor(instance)
        assert not storage.claim_concurrency_slot(IMPORT_POOL, waiting.run_id, "_reads").is_claimed, (
            "a worker asked to stop may still be reading: its slot is kept a while"
        )

        grace = instance.run_monitoring_settings.get("free_slots_after_run_end_seconds") or 0
        with time_machine.travel(datetime.now(UTC) + timedelta(seconds=max(grace, KILL_GRACE_SECONDS) + 1), tick=False):
            _monitor(instance)
        assert storage.claim_concurrency_slot(IMPORT_POOL, waiting.run_id, "_reads").is_claimed
        assert grace > max(KILL_GRACE_SECONDS, POD_GRACE_SECONDS)
        assert storage.get_concurrency_info(IMPORT_POOL).active_run_ids == {waiting.run_id}, (
            "both killed runs gave theirs back"
        )
