"""Brings each campaign's search back while its imports land, without holding a run slot in between."""

import json
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster.assets.campaign_search import CAMPAIGN_SEARCH, campaign_progress
from nakodo_dagster.partitions import CAMPAIGN_PARTITIONS, new_partitions_request
from nakodo_dagster.placement import search_due
from nakodo_dagster.resources import OvertureResource, StoreResource

campaign_search_job = dg.define_asset_job(
    "campaign_search_job",
    selection=[CAMPAIGN_SEARCH],
    description="Add one campaign's newly loaded businesses.",
)


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


@dg.sensor(
    job=campaign_search_job,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Runs each active campaign's search daily, every 2 minutes while its imports are pending "
    "(for up to 6 hours), and whenever new places have landed.",
)
def search_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, overture: OvertureResource
) -> dg.SensorResult | dg.SkipReason:
    now = datetime.now(UTC)
    # The cursor remembers, per campaign, when today's search began and when it last ran.
    searches: dict[str, dict[str, str]] = json.loads(context.cursor) if context.cursor else {}
    campaigns = store.store.campaigns(active_only=True)
    if not campaigns:
        return dg.SkipReason("No active campaign.")
    requests = []
    for campaign in campaigns:
        key = str(campaign.id)
        state = searches.get(key, {})
        progress = campaign_progress(store.store, campaign, overture.off_reason, now)
        window_start = _parse(state.get("window_start"))
        reason = search_due(window_start, _parse(state.get("last")), progress.pending, progress.needs.arrived_at, now)
        if reason is None:
            continue
        if reason == "first search of the day":
            window_start = now
        searches[key] = {"window_start": window_start.isoformat(), "last": now.isoformat()}
        requests.append(
            dg.RunRequest(partition_key=key, tags={"nakodo/campaign": campaign.name[:200], "nakodo/why": reason})
        )
    return dg.SensorResult(
        run_requests=requests,
        cursor=json.dumps(searches, sort_keys=True),
        dynamic_partitions_requests=new_partitions_request(
            context.instance, CAMPAIGN_PARTITIONS.name, (str(c.id) for c in sorted(campaigns, key=lambda c: c.id))
        ),
        skip_reason=None if requests else "No campaign's search is due.",
    )
