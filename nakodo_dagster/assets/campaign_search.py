"""A campaign's businesses, nearest first, added from whatever has landed while the rest is fetched."""

from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster.assets.campaign_map import campaign_map_png, markdown_image
from nakodo_dagster.assets.places import PLACES
from nakodo_dagster.partitions import CAMPAIGN_PARTITIONS
from nakodo_dagster.placement import REQUESTED, Area, Needs, areas_for, import_needs
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import Campaign, Store

CAMPAIGN_SEARCH = dg.AssetKey("campaign_search")


@dataclass(frozen=True)
class CampaignProgress:
    """How far a campaign's imports are: its areas and their states, its needs, what it still waits on."""

    areas: dict[str, Area]
    states: dict[str, str]
    needs: Needs
    pending: int
    not_loaded: int


def campaign_progress(store: Store, campaign: Campaign, off_reason: str | None, now: datetime) -> CampaignProgress:
    """The campaign's needs; with imports off nothing missing will ever come, so only marks are pending."""
    areas = areas_for(campaign.targeting)
    rows = store.import_rows(areas, campaign.targeting.categories)
    needs = import_needs(areas, campaign.targeting.categories, rows, now)
    # A mark that is neither on its way nor to be asked for again is a failed import sitting out its week.
    failed = {r.area for r in rows if r.release == REQUESTED} - needs.coming - set(needs.missing)
    states = {
        key: "coming"
        if key in needs.coming
        else "missing"
        if key in needs.missing
        else "failed"
        if key in failed
        else "loaded"
        for key in areas
    }
    waiting = set(needs.coming) if off_reason else set(needs.coming) | set(needs.missing)
    return CampaignProgress(areas, states, needs, len(waiting), len(needs.missing))


@dg.asset(
    partitions_def=CAMPAIGN_PARTITIONS,
    deps=[dg.AssetDep(PLACES, partition_mapping=dg.AllPartitionMapping())],
    group_name="campaigns",
    kinds={"duckdb", "python"},
)
def campaign_search(
    context: dg.AssetExecutionContext, store: StoreResource, overture: OvertureResource
) -> dg.MaterializeResult:
    """A campaign's businesses, nearest first, each once, new ones added as their areas land."""
    now = datetime.now(UTC)
    campaign = store.store.campaign(int(context.partition_key))
    added, total = store.store.add_campaign_businesses(campaign.id, now)
    progress = campaign_progress(store.store, campaign, overture.off_reason, now)
    if overture.off_reason and progress.not_loaded:
        context.log.warning(
            f"{progress.not_loaded} areas of business listings not loaded: {overture.off_reason}; "
            "searched what is already loaded."
        )
    context.log.info(f"Added {added} businesses ({total} in all); {progress.pending} areas still on their way")
    results = store.store.campaign_results(campaign.id)
    png = campaign_map_png(
        campaign.name,
        campaign.targeting,
        progress.areas,
        progress.states,
        [(r["lat"], r["lng"]) for r in results],
    )
    arrived_at = progress.needs.arrived_at
    return dg.MaterializeResult(
        metadata={
            "campaign": campaign.name,
            "businesses_added": added,
            "businesses_total": total,
            "pending_areas": progress.pending,
            "areas_not_loaded": progress.not_loaded,
            "areas": len(progress.areas),
            "arrived_at": dg.MetadataValue.timestamp(arrived_at) if arrived_at else "nothing landed yet",
            "map": dg.MetadataValue.md(markdown_image(png)),
        }
    )
