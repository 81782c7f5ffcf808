"""A campaign's businesses, nearest first, added from whatever has landed while the rest is fetched.

The search sensor asks for one run of ``search_campaigns_job`` for every campaign due at a tick, so the runs per
hour do not grow with the campaigns; each campaign still gets a materialisation of its own ``campaign_search``
partition. An analyst materialises one partition from the UI through the asset itself.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster.assets.places import PLACES
from nakodo_dagster.campaign_map import campaign_map_png, markdown_image
from nakodo_dagster.partitions import CAMPAIGN_PARTITIONS, campaign_id_of
from nakodo_dagster.placement import REQUESTED, RETRY_DAYS, Area, Needs, areas_for, import_needs
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import Campaign, CampaignAccount, Store
from nakodo_dagster.store.models import SearchProgress
from nakodo_dagster.words import plural

CAMPAIGN_SEARCH = dg.AssetKey("campaign_search")
# The nearest businesses a map draws: beyond this the dots are a blot, and reading them all back cost seconds.
MAP_POINTS = 20_000


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


def _map_key(progress: SearchProgress, total: int) -> str:
    """What a campaign's map shows, in a few numbers: the same key, the same picture."""
    return f"{total} businesses; areas {progress.coming} coming, {progress.missing} missing, {progress.failed} failed"


def _status(standing: CampaignAccount) -> str:
    """``active``, ``paused by hand`` or ``paused: `` and the reason the account's plan paused it."""
    if standing.status == "active":
        return "active"
    return f"paused: {standing.paused_reason}" if standing.paused_reason else "paused by hand"


def _map(store: Store, campaign_id: int, total: int, now: datetime) -> dg.MetadataValue:
    campaign = store.campaign(campaign_id)
    states = campaign_progress(store, campaign, None, now).states
    points = store.campaign_points(campaign.id, MAP_POINTS)
    title = campaign.name if total <= MAP_POINTS else f"{campaign.name} (nearest {MAP_POINTS:,} of {total:,})"
    png = campaign_map_png(title, campaign.targeting, areas_for(campaign.targeting), states, points)
    return dg.MetadataValue.md(markdown_image(png))


def search_campaigns(
    store: Store,
    off_reason: str | None,
    campaign_ids: Sequence[int],
    log: dg.DagsterLogManager,
    *,
    always_map: bool = False,
) -> Iterator[tuple[int, dict]]:
    """Search each campaign in turn and give its materialisation metadata.

    Each search is a short transaction of its own, timed from when it began; the progress of all of them is one
    statement afterwards. A map is drawn only when what it shows changed, or when ``always_map``: a drawing takes
    a tenth of a second, and a thousand campaigns every two minutes would spend the run drawing the same pictures.
    """
    searched = {
        campaign_id: store.add_campaign_businesses(campaign_id, datetime.now(UTC)) for campaign_id in campaign_ids
    }
    now = datetime.now(UTC)
    progress = store.search_progress(now, list(searched))
    changed = store.remember_maps({p.campaign_id: _map_key(p, searched[p.campaign_id][1]) for p in progress})
    standings = store.campaign_accounts(searched)
    for campaign in progress:
        added, total = searched[campaign.campaign_id]
        standing = standings[campaign.campaign_id]
        if off_reason and campaign.not_loaded:
            log.warning(
                f"{campaign.name}: business listings of {plural(campaign.not_loaded, 'area')} not loaded: "
                f"{off_reason}; searched what is already loaded."
            )
        if campaign.failed:
            log.warning(
                f"{campaign.name}: the import of {plural(campaign.failed, 'area')} failed; they are drawn red on the "
                f"map and asked for again after {RETRY_DAYS} days (`nakodo imports status` lists them and how to retry "
                "now). This campaign is searched again when they land."
            )
        map_shown = always_map or campaign.campaign_id in changed
        yield (
            campaign.campaign_id,
            {
                "campaign": campaign.name,
                "account": f"{standing.account.name} (id {standing.account.id})",
                "plan": standing.account.plan,
                "status": _status(standing),
                "businesses_added": added,
                "businesses_total": total,
                "pending_areas": campaign.pending(imports_on=off_reason is None),
                "areas_not_loaded": campaign.not_loaded,
                "areas_failed": campaign.failed,
                "areas": campaign.areas,
                "arrived_at": dg.MetadataValue.timestamp(campaign.arrived_at)
                if campaign.arrived_at
                else "nothing landed yet",
                "map": _map(store, campaign.campaign_id, total, now)
                if map_shown
                else "unchanged: the last materialisation with a map shows it",
            },
        )


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
    [(_, metadata)] = search_campaigns(
        store.store, overture.off_reason, [campaign_id_of(context.partition_key)], context.log, always_map=True
    )
    context.log.info(
        f"Added {plural(metadata['businesses_added'], 'business', 'businesses')} "
        f"({metadata['businesses_total']:,} in all); {plural(metadata['pending_areas'], 'area')} still on their way"
    )
    return dg.MaterializeResult(metadata=metadata)
