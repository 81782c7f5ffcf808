"""``nakodo campaign`` and ``nakodo results``: campaigns, where they look and for what, and the businesses found."""

from __future__ import annotations

import sys
from pathlib import Path

import click
from tqdm import tqdm

from nakodo_dagster.cli.campaign_file import CampaignFile, read_campaign_file
from nakodo_dagster.cli.locations import describe_location, location_options, parse_location
from nakodo_dagster.cli.shared import NakodoCommand, NakodoGroup, open_configured_store, utc_minute
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.export import FORMATS, check_destination, columns, write_results
from nakodo_dagster.placement import Targeting, areas_for, check_categories
from nakodo_dagster.store import DEFAULT_ACCOUNT_ID, Campaign, CampaignsRefused, Store, check_campaign_name
from nakodo_dagster.words import plural


@click.group(cls=NakodoGroup)
def campaign() -> None:
    """Campaigns: where to look (points with a radius, or countries) and for which kinds of business."""


@campaign.command("add")
@click.option("--name", required=True, help="What the campaign is called (1 to 200 characters).")
@location_options
@click.option(
    "--category",
    "categories",
    multiple=True,
    metavar="C",
    help="An Overture category such as cafe or italian_restaurant; repeat for several.",
)
@click.option(
    "--account",
    "account_id",
    type=int,
    default=DEFAULT_ACCOUNT_ID,
    show_default=True,
    help="The account the campaign belongs to (`nakodo account list`); its plan must have room for it.",
)
def campaign_add(
    name: str,
    near: str | None,
    at: str | None,
    radius_km: str | None,
    country: str | None,
    categories: tuple[str, ...],
    account_id: int,
) -> None:
    """Create an active campaign; its id is printed on the last line.

    \b
    nakodo campaign add --name "Leeds cafes" --near Leeds --radius-km 25 --category cafe --category pub
    nakodo campaign add --name "Leeds cafes" --at 53.7997,-1.5492 --radius-km 25 --category cafe
    nakodo campaign add --name "Swiss cafes" --country CH --category cafe --account 2
    """
    name = check_campaign_name(name)
    categories = check_categories(categories)
    request = parse_location(near, at, country, radius_km)
    store = open_configured_store()
    # An unknown account is refused before a place name costs a look-up.
    store.account(account_id)
    targeting = Targeting((request.resolve(store),), categories)
    campaign_id = store.add_campaign(name, targeting, account_id=account_id)
    click.echo(f"Campaign {name!r}: {describe_location(targeting.locations[0])}; {', '.join(categories)}")
    click.echo(campaign_id)


@campaign.command("add-location")
@click.argument("campaign_id", type=int)
@location_options
def campaign_add_location(
    campaign_id: int, near: str | None, at: str | None, radius_km: str | None, country: str | None
) -> None:
    """Add a location to campaign CAMPAIGN_ID: its next sync imports and searches there too.

    \b
    nakodo campaign add-location 3 --near York --radius-km 10
    nakodo campaign add-location 3 --country IE
    """
    request = parse_location(near, at, country, radius_km)
    store = open_configured_store()
    # An unknown campaign is refused before a place name costs a look-up.
    store.campaign(campaign_id)
    location = request.resolve(store)
    store.add_campaign_location(campaign_id, location)
    click.echo(f"Campaign {campaign_id} now also targets {describe_location(location)}")


@campaign.command("import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--check", "check_only", is_flag=True, help="Check the whole file against the store; write nothing.")
def campaign_import(file: Path, check_only: bool) -> None:
    """Create the campaigns of FILE (.csv, .geojson or .parquet), every one or none: each row is one location of a
    campaign, and the rows that share an account and a name are one campaign.

    \b
    name,account,lat,lng,radius_km,country,categories
    Leeds cafes and pubs,2,53.7997,-1.5492,25,,cafe;pub
    Leeds cafes and pubs,2,53.4808,-2.2426,10,,cafe;pub
    Swiss bakeries,2,,,,CH,bakery

    The file is checked whole before anything is written, each row as `campaign add` checks its options and each
    account's plan over its active campaigns and the file's: every row refused is named, with why and what is
    allowed, and nothing is written. GeoJSON features and GeoParquet rows give their point as a Point geometry
    (no lat, lng) and categories as a list or as text separated by ";".
    """
    read = read_campaign_file(file)
    if not read.rows:
        raise InvalidInput(
            f"{file} has no campaigns: one {read.format.row} per location of a campaign "
            "(`nakodo campaign import --help` shows an example)"
        )
    problems = {number: list(found) for number, found in read.problems.items()}
    new = [c.campaign for c in read.campaigns]
    store = open_configured_store()
    _refuse_unknown_accounts(store, read, problems)
    try:
        with tqdm(total=len(new), unit=" campaigns", desc="Importing", disable=check_only or bool(problems)) as bar:
            ids = store.add_campaigns(new, check_only=check_only or bool(problems), written=bar.update)
    except CampaignsRefused as refused:
        for index, why in refused.refusals.items():
            number, problem = read.campaign_problem(index, why)
            problems.setdefault(number, []).append(problem)
    if problems:
        raise InvalidInput(f"{file}: {read.refusal(problems)}")
    accounts = plural(len({c.account_id for c in new}), "account")
    if check_only:
        click.echo(f"{file}: {plural(len(new), 'campaign')} for {accounts}, all fit; nothing written (--check)")
        return
    store.refresh_campaign_statistics()
    numbered = f"id {ids[0]}" if len(ids) == 1 else f"ids {ids[0]} to {ids[-1]}"
    click.echo(f"Imported {plural(len(ids), 'campaign')} for {accounts} from {file}: {numbered}")


def _refuse_unknown_accounts(store: Store, read: CampaignFile, problems: dict[int, list[str]]) -> None:
    """Add to the rows refused already that their account does not exist, if so: said now, not once they are
    mended (the store checks the other rows' accounts)."""
    for account_id in sorted({read.accounts[number] for number in problems if number in read.accounts}):
        try:
            store.account(account_id)
        except InvalidInput as unknown:
            for number, found in problems.items():
                if read.accounts.get(number) == account_id:
                    found.append(str(unknown))


def _locations(campaign: Campaign) -> str:
    return "; ".join(describe_location(location) for location in campaign.targeting.locations)


def _status(campaign: Campaign) -> str:
    return f"{campaign.status}: {campaign.paused_reason}" if campaign.paused_reason else campaign.status


@campaign.command("list")
def campaign_list() -> None:
    """Every campaign, oldest first: id, status, account, name, locations and categories; then why each campaign
    its account's plan paused was paused."""
    store = open_configured_store()
    campaigns = store.campaigns()
    if not campaigns:
        click.echo("No campaigns yet: `nakodo campaign add --help` shows how to add one.")
        return
    accounts = {usage.account.id: usage.account.name for usage in store.accounts()}
    rows = [
        [c.id, c.status, accounts[c.account_id], c.name, _locations(c), ", ".join(c.targeting.categories)]
        for c in campaigns
    ]
    click.echo(columns(["id", "status", "account", "name", "locations", "categories"], rows), nl=False)
    for c in campaigns:
        if c.paused_reason:
            click.echo(f"Campaign {c.id} is {_status(c)}")


@campaign.command("show")
@click.argument("campaign_id", type=int)
def campaign_show(campaign_id: int) -> None:
    """One campaign: its locations, categories, the areas it needs and how many businesses it has."""
    store = open_configured_store()
    campaign = store.campaign(campaign_id)
    areas = areas_for(campaign.targeting)
    countries = sum(1 for key in areas if key.startswith("country:"))
    account = store.account(campaign.account_id)
    lines = [
        f"Campaign {campaign.id}: {campaign.name}",
        f"status: {_status(campaign)}",
        f"account: {account.name} (id {account.id}), plan {account.plan}",
        f"created: {utc_minute(campaign.created_at)}",
        f"categories: {', '.join(campaign.targeting.categories)}",
        "locations:",
        *(f"  {describe_location(location)}" for location in campaign.targeting.locations),
        f"areas: {len(areas) - countries} cells of 0.5 degree, {countries} countries",
        f"businesses: {len(store.campaign_results(campaign.id))}",
    ]
    click.echo("\n".join(lines))


@campaign.command("pause")
@click.argument("campaign_id", type=int)
def campaign_pause(campaign_id: int) -> None:
    """Stop a campaign's imports and searches until it is resumed; its businesses stay, and what it held no
    longer counts against its account's plan."""
    open_configured_store().set_campaign_status(campaign_id, "paused")
    click.echo(f"Campaign {campaign_id} paused")


@campaign.command("resume")
@click.argument("campaign_id", type=int)
def campaign_resume(campaign_id: int) -> None:
    """Let a paused campaign's imports and searches run again, if its account's plan has room for it."""
    open_configured_store().set_campaign_status(campaign_id, "active")
    click.echo(f"Campaign {campaign_id} active")


@click.command(cls=NakodoCommand)
@click.argument("campaign_id", type=int)
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True, help="Output format.")
@click.option(
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Write to FILE instead of the terminal (needed for geoparquet).",
)
def results(campaign_id: int, fmt: str, output: Path | None) -> None:
    """A campaign's businesses, nearest first (those matched by a whole country last).

    CSV has a header row: id, name, category, lat, lng, distance_km, address, websites, phones, country
    (websites and phones joined by "; "). GeoJSON is a FeatureCollection of points; GeoParquet is written
    with geopandas in WGS84.
    """
    check_destination(fmt, output)
    businesses = open_configured_store().campaign_results(campaign_id)
    write_results(businesses, fmt, sys.stdout, output)
    if output is not None:
        click.echo(f"Wrote {len(businesses)} businesses to {output}")
    if not businesses:
        click.echo(f"Campaign {campaign_id} has no businesses yet: `nakodo sync` imports and searches.", err=True)
