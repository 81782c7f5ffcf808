"""The soak's import runs as the instance keeps them: by status, the pairs each was to write, the import pool's slots
they hold, and when each ran."""

from __future__ import annotations

import itertools

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.imports.events import IMPORT_POOL
from nakodo_dagster.jobs.import_places import import_payload

FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
FAILED = dg.DagsterRunStatus.FAILURE
UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]


def import_runs(instance: dg.DagsterInstance, statuses: list[dg.DagsterRunStatus] | None = None) -> list[dg.DagsterRun]:
    """The import runs of the instance, of these statuses (all if None)."""
    return list(instance.get_runs(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}, statuses=statuses or [])))


def run_pairs(run: dg.DagsterRun) -> list[tuple[str, str]]:
    """The (area, category) pairs an import run was to write."""
    return [tuple(pair) for pair in import_payload(run.run_config)["pairs"]]


def slots_held_by_ended_runs(instance: dg.DagsterInstance) -> set[str]:
    """The runs that ended and still hold a slot of the import pool."""
    holders = instance.event_log_storage.get_concurrency_info(IMPORT_POOL).active_run_ids
    if not holders:
        return set()
    return {run.run_id for run in instance.get_runs(dg.RunsFilter(run_ids=list(holders))) if run.status in FINISHED}


def run_spans(instance: dg.DagsterInstance) -> list[tuple[float, float, dg.DagsterRun]]:
    records = instance.get_run_records(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}))
    return [(r.start_time, r.end_time, r.dagster_run) for r in records if r.start_time and r.end_time]


def most_at_once(spans: list[tuple[float, float, dg.DagsterRun]]) -> int:
    edges = sorted([(start, 1) for start, _, _ in spans] + [(end, -1) for _, end, _ in spans])
    return max(itertools.accumulate(step for _, step in edges), default=0)


def pairs_imported_twice_at_once(spans: list[tuple[float, float, dg.DagsterRun]]) -> int:
    by_pair: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for start, end, run in spans:
        for pair in run_pairs(run):
            by_pair.setdefault(pair, []).append((start, end))
    overlapping = 0
    for intervals in by_pair.values():
        intervals.sort()
        overlapping += any(later[0] < earlier[1] for earlier, later in itertools.pairwise(intervals))
    return overlapping
