"""A campaign's search: its businesses added nearest first, how far its imports are, and the metadata of its
``campaign_search`` materialisation, its map drawn or linked. The search_campaigns_job's op and the campaign_search
asset both call ``search_campaigns``, so the asset's key and metadata names live here, below both."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlencode

import dagster as dg

from nakodo_dagster.campaign_map import MARKDOWN_IMAGE, campaign_map, figure_png, markdown_image
from nakodo_dagster.partitions import campaign_id_of, campaign_partition
from nakodo_dagster.placement import RETRY_DAYS, Area, Needs, areas_for, import_needs
from nakodo_dagster.store import Campaign, CampaignAccount, Store
from nakodo_dagster.store.models import SearchProgress
from nakodo_dagster.words import plural

CAMPAIGN_SEARCH = dg.AssetKey("campaign_search")
# The nearest businesses a map draws: beyond this the dots are a blot, and reading them all back cost seconds.
MAP_POINTS = 20_000
# Metadata of every materialisation: the campaign's map drawn in it, or the address of the one that drew it
# ("map"), what that map shows ("map_shows"), and, when linked, when it was drawn ("map_drawn_at").
MAP, MAP_SHOWS, MAP_DRAWN_AT = "map", "map_shows", "map_drawn_at"


@dataclass(frozen=True)
class CampaignProgress:
    """How far a campaign's imports are: its areas and their states (loaded, coming, missing or failed), why each
    failed area failed, its needs, what it still waits on."""

    areas: dict[str, Area]
    states: dict[str, str]
    needs: Needs
    pending: int
    not_loaded: int

    @property
    def failures(self) -> dict[str, str]:
        """Why each failed area failed, by area key: what a map labels it with."""
        return self.needs.failed


def campaign_progress(store: Store, campaign: Campaign, off_reason: str | None, now: datetime) -> CampaignProgress:
    """The campaign's needs; with imports off nothing missing will ever come, so only marks are pending."""
    areas = areas_for(campaign.targeting)
    rows = store.import_rows(areas, campaign.targeting.categories)
    needs = import_needs(areas, campaign.targeting.categories, rows, now)
    states = {
        key: "coming"
        if key in needs.coming
        else "missing"
        if key in needs.missing
        else "failed"
        if key in needs.failed
        else "loaded"
        for key in areas
    }
    waiting = set(needs.coming) if off_reason else set(needs.coming) | set(needs.missing)
    return CampaignProgress(areas, states, needs, len(waiting), len(needs.missing))


def failed_areas(store: Store, campaign_id: int, now: datetime) -> dict[str, str]:
    """Why each of the campaign's failed areas failed, by area key (what its map labels them with)."""
    return campaign_progress(store, store.campaign(campaign_id), None, now).failures


def _map_key(progress: SearchProgress, total: int) -> str:
    """What a campaign's map shows, in a few numbers: the same key, the same picture."""
    return (
        f"{plural(total, 'business', 'businesses')}; {plural(progress.areas, 'area')}: {progress.coming} coming, "
        f"{progress.missing} missing, {progress.failed} failed"
    )


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
    listed = [(lat, lng) for lat, lng, removed, closed in points if not removed and not closed]
    removed = [(lat, lng) for lat, lng, removed, _ in points if removed]
    closed = [(lat, lng) for lat, lng, removed, closed in points if closed and not removed]
    figure = campaign_map(title, campaign.targeting, areas_for(campaign.targeting), states, listed, removed, closed)
    png = figure_png(figure)
    return dg.MetadataValue.md(markdown_image(png))


@dataclass(frozen=True)
class DrawnMap:
    """A campaign's map as its latest materialisation shows it: what it shows, and when the materialisation that
    drew it was logged."""

    shows: str
    drawn_at: float


def map_url(partition: str, drawn_at: float) -> str:
    """The Dagster UI's page of the campaign's materialisation logged at ``drawn_at``: the asset's events of that
    partition, as of that time (so it is first however many came after), that event open."""
    # In milliseconds, cut as the UI's GraphQL gives an event's time: the UI opens the first event at or before it.
    at = int(drawn_at * 1000)
    query = urlencode({"view": "events", "partitions[0]": partition, "asOf": at, "time": at})
    return f"/assets/{CAMPAIGN_SEARCH.to_user_string()}?{query}"


def drawn_maps(instance: dg.DagsterInstance, partitions: Iterable[str]) -> dict[int, DrawnMap]:
    """The map each of these campaign partitions' latest materialisation shows, drawn in it or linked from it, by
    campaign; a campaign with no materialisation, or one whose map is neither, is left out. Two reads of the event
    log for any number."""
    latest = instance.get_latest_storage_id_by_partition(
        CAMPAIGN_SEARCH, dg.DagsterEventType.ASSET_MATERIALIZATION, set(partitions)
    )
    if not latest:
        return {}
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=CAMPAIGN_SEARCH, storage_ids=list(latest.values())), limit=len(latest)
    ).records
    found = {}
    for record in records:
        metadata = record.asset_materialization.metadata
        shown, drawn_at = metadata.get(MAP), metadata.get(MAP_DRAWN_AT)
        if MAP_SHOWS not in metadata or shown is None:
            continue
        if drawn_at is not None:
            found[campaign_id_of(record.partition_key)] = DrawnMap(metadata[MAP_SHOWS].value, drawn_at.value)
        elif str(shown.value).startswith(MARKDOWN_IMAGE):
            found[campaign_id_of(record.partition_key)] = DrawnMap(metadata[MAP_SHOWS].value, record.timestamp)
    return found


def _linked_map(partition: str, drawn: DrawnMap) -> dict[str, dg.MetadataValue]:
    # A URL, not Markdown: the UI's metadata table shows it as a link at once, where Markdown waits behind a button.
    return {
        MAP: dg.MetadataValue.url(map_url(partition, drawn.drawn_at)),
        MAP_DRAWN_AT: dg.MetadataValue.timestamp(drawn.drawn_at),
    }


def search_campaigns(
    store: Store,
    instance: dg.DagsterInstance,
    off_reason: str | None,
    campaign_ids: Sequence[int],
    log: dg.DagsterLogManager,
    *,
    always_map: bool = False,
) -> Iterator[tuple[int, dict]]:
    """Search each campaign in turn and give its materialisation metadata.

    Each search is a short transaction of its own, timed from when it began; the progress of all of them is one
    statement afterwards. Every materialisation carries the map: drawn when what it shows differs from the map the
    campaign's latest materialisation in ``instance`` shows (or when ``always_map``), otherwise a link to the one
    that drew it: a drawing takes a tenth of a second, and a thousand campaigns every two minutes would spend the
    run drawing the same pictures.
    """
    searched = {
        campaign_id: store.add_campaign_businesses(campaign_id, datetime.now(UTC)) for campaign_id in campaign_ids
    }
    now = datetime.now(UTC)
    progress = store.search_progress(now, list(searched))
    partitions = {p.campaign_id: campaign_partition(p.campaign_id, p.name) for p in progress}
    shown = {} if always_map else drawn_maps(instance, partitions.values())
    standings = store.campaign_accounts(searched)
    for campaign in progress:
        added, total = searched[campaign.campaign_id]
        standing = standings[campaign.campaign_id]
        if off_reason and campaign.not_loaded:
            log.warning(
                f"{campaign.name}: business listings of {plural(campaign.not_loaded, 'area')} not loaded: "
                f"{off_reason}; searched what is already loaded."
            )
        failures = failed_areas(store, campaign.campaign_id, now) if campaign.failed else {}
        if failures:
            one = len(failures) == 1
            log.warning(
                f"{campaign.name}: {plural(len(failures), 'area')} failed to import ({next(iter(failures.values()))}"
                f"{'' if one else ', and others'}); drawn red on the map, and asked for again {RETRY_DAYS} days after "
                "the failure (`nakodo imports status` lists why and how to retry now). The campaign is searched "
                f"again when {'it lands' if one else 'they land'}."
            )
        shows = _map_key(campaign, total)
        drawn = shown.get(campaign.campaign_id)
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
                "failed_areas": dg.MetadataValue.json(failures),
                "areas": campaign.areas,
                "arrived_at": dg.MetadataValue.timestamp(campaign.arrived_at)
                if campaign.arrived_at
                else "nothing landed yet",
                MAP_SHOWS: shows,
                **(
                    _linked_map(partitions[campaign.campaign_id], drawn)
                    if drawn is not None and drawn.shows == shows
                    else {MAP: _map(store, campaign.campaign_id, total, now)}
                ),
            },
        )
