"""The Dagster definitions run in-process, no daemon: sensor ticks, the runs they ask for, the searches."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job, search_run_config
from nakodo_dagster.partitions import apply_partitions_requests, campaign_partitions_requests
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.failure_sensor import import_job_pairs, report_failed_partitions
from nakodo_dagster.sensors.import_sensor import request_import_runs
from nakodo_dagster.words import plural

log = logging.getLogger("nakodo_dagster")
# How often a sync waiting on imports launched elsewhere looks at the store again.
POLL_SECONDS = 2


@dataclass
class SyncReport:
    """What a headless sync did: runs executed and failed, businesses added, areas still pending."""

    import_runs: int = 0
    failed_runs: list[str] = field(default_factory=list)
    searches: int = 0
    businesses_added: int = 0
    pending: int = 0
    imports_off: str | None = None


def register_partitions(instance: dg.DagsterInstance, result: dg.SensorResult) -> None:
    """Register the dynamic partitions a sensor evaluation asked for, as the daemon does with its result."""
    apply_partitions_requests(instance, result.dynamic_partitions_requests or [])


def _execute_import(instance: dg.DagsterInstance, resources: dict, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    return import_places.execute_in_process(
        run_config=request.run_config, instance=instance, tags=request.tags, resources=resources, raise_on_error=False
    )


def sync(
    instance: dg.DagsterInstance,
    store: StoreResource,
    overture: OvertureResource,
    campaign_id: int | None = None,
    wait_seconds: float = 600,
    on_step: Callable[[str, SyncReport], None] = lambda message, report: None,
) -> SyncReport:
    """Import what the campaigns need and search them until nothing is pending, imports are off, or time is up."""
    resources = {"store": store, "overture": overture}
    report = SyncReport(imports_off=overture.off_reason)
    if campaign_id is not None:
        campaigns = [store.store.campaign(campaign_id)]
    else:
        campaigns = store.store.campaigns(active_only=True)
    apply_partitions_requests(instance, campaign_partitions_requests(instance, [(c.id, c.name) for c in campaigns]))
    deadline = time.monotonic() + wait_seconds
    campaign_ids = [c.id for c in campaigns]
    cursor: str | None = None
    # The areas pending as the last search began, None before the first.
    pending_searched: int | None = None
    while True:
        result = request_import_runs(
            instance,
            store.store,
            overture,
            datetime.now(UTC),
            log,
            campaign_ids=campaign_ids,
            cursor=cursor,
        )
        cursor = result.cursor
        requests = result.run_requests or []
        register_partitions(instance, result)
        on_step(f"{len(requests)} import runs to execute", report)
        # One at a time: Dagster's in-process execution captures logs globally and is not safe across threads.
        for request in requests:
            outcome = _execute_import(instance, resources, request)
            report.import_runs += 1
            if not outcome.success:
                report.failed_runs.append(request.tags.get(tags.BOX, request.run_key or ""))
                # What import_failure_sensor does under the daemon: the UI shows the run's pairs as failed.
                run = outcome.dagster_run
                report_failed_partitions(instance, run, import_job_pairs(run) or (), store.store)
            on_step(f"import {request.tags.get(tags.AREA)} {'ok' if outcome.success else 'FAILED'}", report)
        progress = store.store.search_progress(datetime.now(UTC), campaign_ids)
        pending = sum(p.pending(overture.off_reason is None) for p in progress)
        # Places the last search has not read (the search sensor's rule, on what each search records it read), or
        # fewer areas pending than as it began (a landing that committed after it looked, stamped before what it
        # read). A time of the last search would count a landing within the commit overlap as new at every poll.
        if requests or pending_searched is None or any(p.landed_unread for p in progress) or pending < pending_searched:
            pending_searched = pending
            _search(instance, resources, campaign_ids, report)
        else:
            # Nothing ran here and nothing landed: a search would find nothing new. Imports someone else launched
            # are on their way, and the store says when they land.
            report.pending = pending
        on_step(f"{plural(report.pending, 'area')} pending", report)
        if report.pending == 0 or overture.off_reason or time.monotonic() > deadline:
            return report
        if not requests:
            time.sleep(POLL_SECONDS)


def _search(instance: dg.DagsterInstance, resources: dict, campaign_ids: list[int], report: SyncReport) -> None:
    """One batch run searching every campaign synced, as the search sensor asks for."""
    searched = search_campaigns_job.execute_in_process(
        run_config=search_run_config(campaign_ids), instance=instance, resources=resources
    )
    report.pending = 0
    for materialization in searched.asset_materializations_for_node("search_due_campaigns"):
        report.searches += 1
        report.businesses_added += materialization.metadata["businesses_added"].value
        report.pending += materialization.metadata["pending_areas"].value
