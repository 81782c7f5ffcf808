"""An import run's tags as the runs list shows them: what a person reads in sight, the machinery's tags hidden the
way Dagster hides its own; and runs recorded before, under the machinery's earlier keys, still read and found."""

from __future__ import annotations

import logging
import socket
import subprocess
from datetime import timedelta

from dagster_graphql.test.utils import execute_dagster_graphql
from test_import_sensor import LEEDS, marks, tick
from test_ui_graphql import _loaded

from nakodo_dagster import tags
from nakodo_dagster.dagster_internals import WorkerStatus
from nakodo_dagster.imports.run import run_stamp
from nakodo_dagster.jobs.import_places import import_payload, import_places
from nakodo_dagster.launcher import ForkserverRunLauncher
from nakodo_dagster.sensors.import_sensor import LAUNCH_GRACE_MINUTES, request_import_runs

RUN_TAGS = """
query {
  runsOrError { ... on Runs { results { runId tags { key value } } } }
}
"""
MACHINERY = (tags.IMPORT_KEY, tags.STORE, tags.STAMP, tags.RUN_WORKER_PID, tags.RUN_WORKER_HOST, tags.RUN_WORKER_START)


def _with_earlier_keys(run_tags: dict[str, str]) -> dict[str, str]:
    """A run's tags as a run recorded before the machinery's were hidden carries them."""
    return {tags.EARLIER_KEYS.get(key, key): value for key, value in run_tags.items()}


def test_the_runs_list_shows_what_a_person_reads_and_hides_the_machinery(instance, resources, tmp_path):
    resources["store"].store.add_campaign("Leeds", LEEDS)
    (request, *_) = tick(instance, resources).run_requests
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    worker = {tags.RUN_WORKER_PID: "4242", tags.RUN_WORKER_HOST: socket.gethostname(), tags.RUN_WORKER_START: "77"}
    instance.add_run_tags(run.run_id, worker)

    with _loaded(instance, tmp_path) as context:
        result = execute_dagster_graphql(context.create_request_context(), RUN_TAGS)

    (shown,) = [r for r in result.data["runsOrError"]["results"] if r["runId"] == run.run_id]
    shown_keys = {tag["key"] for tag in shown["tags"]}
    people = {tags.KIND, tags.BOX, tags.AREA, tags.CATEGORIES, tags.RELEASE, tags.LINE, tags.CAMPAIGN}
    assert people <= shown_keys
    assert not [key for key in shown_keys if key.startswith("nakodo/") and key not in people], shown_keys
    assert not shown_keys & set(MACHINERY)
    # Hidden from the UI, not gone: the sensors and the launcher read them.
    stored = instance.get_run_by_id(run.run_id).tags
    assert all(key in stored for key in MACHINERY)
    assert run_stamp(instance.get_run_by_id(run.run_id)) == tags.stamp_from_tag(request.tags[tags.STAMP])


def test_a_run_recorded_under_the_earlier_keys_is_still_read(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    request = first.run_requests[0]
    ended = subprocess.Popen(["true"])
    ended.wait()
    earlier = {
        **_with_earlier_keys(request.tags),
        "nakodo/run_worker_pid": str(ended.pid),
        "nakodo/run_worker_host": socket.gethostname(),
    }
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=earlier)
    assert tags.STAMP not in run.tags and "nakodo/stamp" in run.tags

    # Its stamp: how the failure sensor marks its pairs failed and a cancel takes them back.
    assert run_stamp(run) == tags.stamp_from_tag(request.tags[tags.STAMP])
    # Its worker: how a cancel from the UI reaches it, and how run monitoring sees it gone.
    health = ForkserverRunLauncher().check_run_worker_health(run)
    assert health.status == WorkerStatus.FAILED and f"pid {ended.pid}" in (health.msg or "")
    # Its marks have a run: past the launch grace, they are not taken back as never launched.
    later = tags.stamp_from_tag(request.tags[tags.STAMP]) + timedelta(minutes=LAUNCH_GRACE_MINUTES + 1)
    request_import_runs(instance, store, resources["overture"], later, logging.getLogger("test"))
    assert {tuple(pair) for pair in import_payload(request.run_config)["pairs"]} <= marks(resources)
    # Queued, it blocks the same work: the same payload is not launched again beside it.
    every_pair = [tuple(p) for r in first.run_requests for p in import_payload(r.run_config)["pairs"]]
    store.take_back(every_pair, tags.stamp_from_tag(request.tags[tags.STAMP]))
    second = tick(instance, resources)
    assert request.tags[tags.IMPORT_KEY] not in {r.tags[tags.IMPORT_KEY] for r in second.run_requests}
    assert len(second.run_requests) == len(first.run_requests) - 1
