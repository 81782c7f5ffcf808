"""Brings each campaign's search back while its imports land: one batch run per tick for every campaign due."""

from collections import Counter
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.jobs.by_hand import search_campaigns_by_hand
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job, search_run_config
from nakodo_dagster.partitions import campaign_partitions_requests
from nakodo_dagster.placement import SEARCH_IN_FLIGHT, search_due
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import COMMIT_OVERLAP, Store
from nakodo_dagster.store.models import SearchProgress
from nakodo_dagster.words import plural

FIRST_OF_THE_DAY = "first search of the day"


def in_flight(progress: SearchProgress, now: datetime) -> bool:
    """Whether the campaign's last requested search has not begun yet and may still be on its way."""
    requested = progress.requested_at
    if requested is None or (progress.searched_at is not None and progress.searched_at >= requested):
        return False
    return now - requested < SEARCH_IN_FLIGHT


def due_reason(progress: SearchProgress, imports_on: bool, now: datetime) -> str | None:
    """Why the campaign's search should run now (``placement.search_due``), or None."""
    if in_flight(progress, now):
        return None
    # A pair stamped shortly before the last search began may have committed after it looked: until it is
    # COMMIT_OVERLAP older than that search, it counts as landed since, unless that search read it (the newest
    # landing it read is at least as new). Without that, every landing brought two more searches that found
    # nothing. A pair stamped in the same milliseconds as a newer one the search read, and committed after the
    # search began, waits for the campaign's next search, which reads it (searched_through is a minute back).
    visible_by = progress.arrived_at + COMMIT_OVERLAP if progress.landed_unread else None
    return search_due(progress.window_start, progress.searched_at, progress.pending(imports_on), visible_by, now)


def _summary(reasons: dict[int, str]) -> str:
    kinds = Counter("imports on their way" if "on their way" in why else why for why in reasons.values())
    return f"{plural(len(reasons), 'campaign')}: " + ", ".join(
        f"{kind} ({count})" for kind, count in sorted(kinds.items())
    )


@dg.sensor(
    # It launches search_campaigns_job; search_campaigns_by_hand, never launched, makes the UI list it as the
    # automation of campaign_search.
    jobs=[search_campaigns_job, search_campaigns_by_hand],
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Searches every active campaign daily, every 2 minutes while its imports are pending (for up to "
    "6 hours), and whenever new places have landed: one run per tick for all the campaigns due.",
)
def search_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, overture: OvertureResource
) -> dg.SensorResult:
    with store.held() as held:
        return _request_searches(context, held, overture.off_reason is None, datetime.now(UTC))


def _request_searches(
    context: dg.SensorEvaluationContext, store: Store, imports_on: bool, now: datetime
) -> dg.SensorResult:
    count = store.count_progress(now)
    if not count.active:
        return dg.SensorResult(skip_reason="No active campaign.")
    reasons = {c.campaign_id: why for c in count.maybe_due if (why := due_reason(c, imports_on, now))}
    recounted = f"{count.recounted:,} campaign areas recounted"
    if not reasons:
        return dg.SensorResult(skip_reason=f"None of {plural(count.active, 'campaign')} is due ({recounted}).")
    due = [c for c in count.maybe_due if c.campaign_id in reasons]
    store.request_searches(reasons, [i for i, why in reasons.items() if why == FIRST_OF_THE_DAY], now)
    summary = _summary(reasons)
    context.log.info(f"Searching {summary} of {plural(count.active, 'campaign')}; {recounted}.")
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                job_name=search_campaigns_job.name,
                run_config=search_run_config(sorted(reasons), reasons),
                tags={tags.WHY: summary, tags.CAMPAIGN: tags.campaign_names([c.name for c in due])},
            )
        ],
        # Only the campaigns searched now: registering every campaign read the fleet's keys on every tick.
        dynamic_partitions_requests=campaign_partitions_requests(
            context.instance, ((c.campaign_id, c.name) for c in due)
        ),
    )
