"""``nakodo``: campaigns, headless runs of the Dagster definitions, results, the freshness table, samples.

Bad input exits with code 2 and one message saying what is wrong and what is allowed, before anything is
written; a failure that is not the input's fault (a failed import run, an unreachable Nominatim) exits with 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from pathlib import Path

import click
from geopy.geocoders import Nominatim
from tqdm import tqdm

from nakodo_dagster import settings
from nakodo_dagster.countries import country_name
from nakodo_dagster.drift import accept_command
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.export import FORMATS, check_destination, columns, write_results
from nakodo_dagster.geocode import GeocoderUnavailable, geocode, nominatim, normalise_place_name
from nakodo_dagster.overture.cli import sample_release
from nakodo_dagster.overture.releases import newest_release, resolve_release
from nakodo_dagster.overture.sample import write_sample_release
from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    RADII_KM,
    REQUESTED,
    RETRY_DAYS,
    CountryLocation,
    Location,
    PointLocation,
    Targeting,
    areas_for,
    check_categories,
    failure_reason,
    parse_area_key,
    retry_allowed_at,
)
from nakodo_dagster.plan_config import configured_plans, plan_named
from nakodo_dagster.plans import LIMITS, Plan
from nakodo_dagster.store import (
    DEFAULT_ACCOUNT_ID,
    AccountUsage,
    Campaign,
    Store,
    StoreLocked,
    check_account_name,
    check_campaign_name,
    open_store,
)
from nakodo_dagster.words import plural

DEMO_CAMPAIGNS = (
    ("Leeds cafes and pubs", Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))),
    ("Paris bakeries and restaurants", Targeting((PointLocation(48.8566, 2.3522, 100),), ("bakery", "restaurant"))),
    ("Swiss cafes", Targeting((CountryLocation("CH"),), ("cafe",))),
    ("Fiji restaurants", Targeting((PointLocation(-17.0, 179.97, 50),), ("restaurant",))),
)
SYNC_LOG = "nakodo_sync.log"


def database_url() -> str:
    """NAKODO_DATABASE, or the embedded default: a DuckDB file in the project's data folder."""
    return os.environ.get("NAKODO_DATABASE") or settings.DEFAULTS["NAKODO_DATABASE"]()


def open_configured_store() -> Store:
    """The configured store, its schema up to date."""
    store = open_store(database_url())
    store.migrate()
    return store


class _ClearErrors:
    """Bad input becomes click's usage error (exit 2, the command's own usage); an unavailable service exit 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except InvalidInput as exc:
            raise click.UsageError(str(exc), ctx) from exc
        except (GeocoderUnavailable, StoreLocked) as exc:
            raise click.ClickException(str(exc)) from exc


class NakodoCommand(_ClearErrors, click.Command):
    """A ``nakodo`` command."""


class NakodoGroup(_ClearErrors, click.Group):
    """A ``nakodo`` group: its commands and groups report errors the same way."""

    command_class = NakodoCommand
    group_class = type


@click.group(cls=NakodoGroup)
def main() -> None:
    """Business listings from Overture Maps for outreach campaigns.

    Configured by NAKODO_DATABASE (a DuckDB file or a postgresql:// URL; default data/nakodo.duckdb),
    NAKODO_OVERTURE_ROOT (a folder or an s3:// prefix of releases; unset: imports off),
    NAKODO_OVERTURE_RELEASE (default: the newest), NAKODO_OVERTURE_INDEX (the release indexes' folder;
    default: beside a DuckDB store, else the user's cache), AWS_ENDPOINT_URL (an S3-compatible endpoint),
    NAKODO_NOMINATIM_URL (default: OpenStreetMap's public Nominatim) and NAKODO_PLANS (a plans file replacing
    the shipped plans).
    """


main.add_command(sample_release, "sample-release")


@main.command()
def demo() -> None:
    """Prepare the embedded default: a sample release, the store and demo campaigns (idempotent)."""
    root = os.environ.get("NAKODO_OVERTURE_ROOT") or str(settings.DATA / "overture")
    if "://" not in root:
        Path(root).mkdir(parents=True, exist_ok=True)
        try:
            click.echo(f"Sample release {newest_release(root)} already in {root}")
        except InvalidInput:
            click.echo(f"Writing a sample release into {root} (first run only)...")
            write_sample_release(root)
    store = open_configured_store()
    if not store.campaigns():
        for name, targeting in DEMO_CAMPAIGNS:
            click.echo(f"Demo campaign {store.add_campaign(name, targeting)}: {name}")
    click.echo(f"Store ready: {database_url()}")


# Campaigns


def describe_location(location: Location) -> str:
    """A location as people read it: ``53.7997,-1.5492 within 25 km`` or ``CH (Switzerland)``."""
    if isinstance(location, PointLocation):
        return f"{location.lat:g},{location.lng:g} within {location.radius_km} km"
    return f"{location.country_code} ({country_name(location.country_code)})"


@dataclass(frozen=True)
class LocationRequest:
    """A location as typed, checked: ready, or a place name still to look up with its radius."""

    location: Location | None = None
    place_name: str | None = None
    radius_km: int | None = None
    geocoder: Nominatim | None = None

    def resolve(self, store: Store) -> Location:
        """The location, looking the place name up (once ever, then from the store) if there is one."""
        if self.location is not None:
            return self.location
        place, kept = geocode(store, self.place_name, self.geocoder)
        origin = "known from an earlier look-up" if kept else "looked up in OpenStreetMap"
        click.echo(f"{self.place_name!r} is {place.display_name} ({place.lat:g},{place.lng:g}), {origin}")
        return PointLocation(place.lat, place.lng, self.radius_km)


def parse_at(text: str) -> tuple[float, float]:
    """``LAT,LNG`` in decimal degrees as two numbers (their ranges are the policy's to check)."""
    parts = text.split(",")
    try:
        if len(parts) == 2:
            return float(parts[0]), float(parts[1])
    except ValueError:
        pass
    raise InvalidInput(f"--at {text!r} is not allowed: use LAT,LNG in decimal degrees, e.g. --at 53.7997,-1.5492")


def parse_location(near: str | None, at: str | None, country: str | None, radius_km: str | None) -> LocationRequest:
    """Exactly one of --near, --at or --country, a radius with a point and none with a country; checked fully."""
    given = [name for name, value in (("--near", near), ("--at", at), ("--country", country)) if value is not None]
    radii = ", ".join(str(r) for r in RADII_KM)
    if len(given) != 1:
        raise InvalidInput(
            f"give exactly one location, not {' and '.join(given) or 'none'}: "
            "--near PLACE or --at LAT,LNG with --radius-km R, or --country CC"
        )
    if country is not None:
        if radius_km is not None:
            raise InvalidInput("--radius-km goes with --near or --at; a --country is taken whole")
        return LocationRequest(CountryLocation(country.strip().upper()))
    if radius_km is None:
        raise InvalidInput(f"--radius-km is needed with {given[0]}; allowed: {radii}")
    if at is not None:
        return LocationRequest(PointLocation(*parse_at(at), int(radius_km)))
    normalise_place_name(near)
    return LocationRequest(place_name=near, radius_km=int(radius_km), geocoder=nominatim())


def location_options(command: Callable) -> Callable:
    """The options that name one location, shared by ``campaign add`` and ``campaign add-location``."""
    options = (
        click.option("--near", metavar="PLACE", help="A place name, looked up once in OpenStreetMap's Nominatim."),
        click.option("--at", metavar="LAT,LNG", help="A centre in decimal degrees, e.g. 53.7997,-1.5492."),
        click.option(
            "--radius-km",
            type=click.Choice([str(r) for r in RADII_KM]),
            help="The radius around --near or --at, in km.",
        ),
        click.option("--country", metavar="CC", help="A whole country by ISO 3166-1 alpha-2 code, e.g. FR."),
    )
    for option in reversed(options):
        command = option(command)
    return command


@main.group()
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
        f"created: {campaign.created_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC",
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


# Accounts and plans


@main.group()
def account() -> None:
    """Accounts: who campaigns belong to, and the plan that bounds what their active campaigns ask for.

    Plans come from the package (free, starter, pro, unlimited) or from the TOML file NAKODO_PLANS names.
    """


def _plan_in_words(plan: Plan) -> str:
    return f"plan {plan.name} ({plan.describe()})"


def _used(entry: AccountUsage, kind: str, plan: Plan | None) -> str:
    """What the account's active campaigns use of one limit: ``20 of 25``, or ``20`` where there is no limit."""
    used, limit = getattr(entry.usage, kind), getattr(plan, kind, None)
    return f"{used:,}" if limit is None else f"{used:,} of {limit:,}"


@account.command("add")
@click.option("--name", required=True, help="What the account is called (1 to 200 characters, unique).")
@click.option("--plan", "plan_name", required=True, help="One of the plans in force, e.g. free, starter, pro.")
def account_add(name: str, plan_name: str) -> None:
    """Create an account on a plan; its id is printed on the last line.

    \b
    nakodo account add --name "Acme Bakeries" --plan starter
    """
    name = check_account_name(name)
    plan = plan_named(plan_name)
    account_id = open_configured_store().add_account(name, plan.name)
    click.echo(f"Account {name!r} on {_plan_in_words(plan)}")
    click.echo(account_id)


@account.command("list")
def account_list() -> None:
    """Every account, oldest first: its plan and what its active campaigns use of each limit."""
    plans = configured_plans()
    rows = []
    for entry in open_configured_store().accounts():
        plan = plans.get(entry.account.plan)
        name = entry.account.plan if plan else f"{entry.account.plan} (not a plan in force)"
        used = [_used(entry, kind, plan) for kind, _, _ in LIMITS]
        rows.append([entry.account.id, entry.account.name, name, *used, entry.paused_for_plan])
    header = ["id", "name", "plan", *(many for _, _, many in LIMITS), "paused by plan"]
    click.echo(columns(header, rows), nl=False)


@account.command("show")
@click.argument("account_id", type=int)
def account_show(account_id: int) -> None:
    """One account: its plan, its limits, what its active campaigns use and what is left."""
    entry = open_configured_store().account_usage(account_id)
    plan = plan_named(entry.account.plan)
    left = plan.left(entry.usage)
    lines = [
        f"Account {entry.account.id}: {entry.account.name}",
        _plan_in_words(plan),
        f"created: {entry.account.created_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC",
        *(
            f"{many}: {_used(entry, kind, plan)}" + (" (no limit)" if left[kind] is None else f", {left[kind]:,} left")
            for kind, _, many in LIMITS
        ),
        f"campaigns paused by the plan: {entry.paused_for_plan} (`nakodo campaign list` says why)",
    ]
    click.echo("\n".join(lines))


@account.command("set-plan")
@click.argument("account_id", type=int)
@click.argument("plan_name", metavar="PLAN")
def account_set_plan(account_id: int, plan_name: str) -> None:
    """Move account ACCOUNT_ID to PLAN. If its active campaigns no longer fit, the newest are paused (with the
    reason, in `campaign show` and `campaign list`) until the rest does; resume them once the plan has room.
    Setting the plan the account is on applies its limits again after the plans file changed.
    """
    plan = plan_named(plan_name)
    paused = open_configured_store().set_account_plan(account_id, plan.name)
    click.echo(f"Account {account_id} is on {_plan_in_words(plan)}")
    for campaign_id, reason in paused.items():
        click.echo(f"Paused campaign {campaign_id}: {reason}")
    if not paused:
        click.echo("Its active campaigns fit the plan.")


# Headless runs


def dagster_home() -> Path:
    """DAGSTER_HOME if set, else data/dagster_home, created with the embedded default's settings on first use."""
    configured = os.environ.get("DAGSTER_HOME")
    if configured:
        home = Path(configured).absolute()
        if not home.is_dir():
            raise InvalidInput(
                f"DAGSTER_HOME {configured!r} is not a folder: create it, or unset it to use data/dagster_home"
            )
    else:
        home = (settings.DATA / "dagster_home").absolute()
        home.mkdir(parents=True, exist_ok=True)
        instance_file = home / "dagster.yaml"
        if not instance_file.is_symlink() and not instance_file.exists():
            # The embedded default's instance, the one `make run` links: two imports at a time, telemetry off.
            instance_file.write_text(
                files("nakodo_dagster").joinpath("data", "dagster.yaml").read_text("utf-8"), "utf-8"
            )
    # Dagster wants an absolute DAGSTER_HOME; the import and search runs in this process read it.
    os.environ["DAGSTER_HOME"] = str(home)
    return home


@main.command()
@click.option("--campaign", "campaign_id", type=int, help="Only this campaign [default: every active campaign].")
@click.option(
    "--wait",
    "wait_seconds",
    type=click.FloatRange(min=0),
    default=600,
    show_default=True,
    help="Seconds to keep waiting for imports before stopping (the next sync carries on).",
)
def sync(campaign_id: int | None, wait_seconds: float) -> None:
    """Run the Dagster definitions headless: import what the campaigns need, then search them.

    In this process and without a daemon: the import sensor's ticks, the import runs they ask for (one after
    the other) and each campaign's search, all recorded in the Dagster instance at DAGSTER_HOME (default
    data/dagster_home), so the UI shows them later. Stops when no campaign waits on an import, when imports
    are off, or after --wait seconds. Exits with 1 if an import run failed.
    """
    store = open_configured_store()
    root = settings.value("NAKODO_OVERTURE_ROOT").strip()
    release = settings.value("NAKODO_OVERTURE_RELEASE").strip()
    if campaign_id is not None:
        chosen = store.campaign(campaign_id)
        if chosen.status != "active":
            # A paused campaign is not imported for: the sync would wait on imports nobody asks for.
            raise InvalidInput(
                f"campaign {campaign_id} is paused, and nothing is imported for a paused campaign: resume it first "
                f"(`nakodo campaign show {campaign_id}` says why it is paused)"
            )
    elif not store.campaigns(active_only=True):
        click.echo("No active campaign to sync: `nakodo campaign add --help` shows how to add one.")
        return
    resolved = resolve_release(root, release or None) if root else None
    home = dagster_home()
    if resolved:
        click.echo(f"Importing from release {resolved} under {root}")
    else:
        click.echo(
            "Warning: imports are off because NAKODO_OVERTURE_ROOT isn't set: the search works on what is already "
            "loaded and no import is asked for.",
            err=True,
        )
    log_path = home / SYNC_LOG
    terminal = sys.stderr
    # Dagster prints every event of every run to stderr; the events are in the instance for the UI anyway, so the
    # terminal keeps the progress bar and the log file keeps the rest (warnings and tracebacks included).
    with log_path.open("a", encoding="utf-8") as log, contextlib.redirect_stderr(log):
        # Dagster takes seconds to import: only this command pays for it.
        import dagster as dg

        from nakodo_dagster.headless import SyncReport
        from nakodo_dagster.headless import sync as headless_sync
        from nakodo_dagster.resources import configured_resources

        def on_step(message: str, report: SyncReport) -> None:
            bar.set_description_str(message, refresh=False)
            bar.set_postfix_str(
                f"{plural(report.import_runs, 'run')} ({len(report.failed_runs)} failed), "
                f"{plural(report.searches, 'search', 'searches')}, "
                f"{plural(report.businesses_added, 'business', 'businesses')} added, "
                f"{plural(report.pending, 'area')} pending"
            )
            bar.update()

        # The code location's own resources, so that a sync reads and writes exactly what the daemon's runs do.
        os.environ["NAKODO_DATABASE"] = database_url()
        with (
            dg.DagsterInstance.get() as instance,
            dg.build_resources(configured_resources(), instance=instance) as resources,
            tqdm(file=terminal, unit=" steps", bar_format="{desc}{postfix} [{elapsed}]") as bar,
        ):
            report = headless_sync(
                instance,
                resources.store,
                resources.overture,
                campaign_id=campaign_id,
                wait_seconds=wait_seconds,
                on_step=on_step,
            )
    click.echo(
        f"Synced: {plural(report.import_runs, 'import run')} ({len(report.failed_runs)} failed), "
        f"{plural(report.searches, 'search', 'searches')}, "
        f"{plural(report.businesses_added, 'business', 'businesses')} added, "
        f"{plural(report.pending, 'area')} still pending. Dagster's log: {log_path}"
    )
    if report.pending and not report.imports_off:
        click.echo(f"Imports still on their way after {wait_seconds:g} s: run `nakodo sync` again later.")
    if report.failed_runs:
        raise click.ClickException(
            f"{plural(len(report.failed_runs), 'import run')} failed (boxes {'; '.join(report.failed_runs)}): "
            f"their pairs are not asked for again for {RETRY_DAYS} days; `nakodo imports status` shows them and "
            "`nakodo imports retry AREA CATEGORY` overrides the block"
        )


# Results


@main.command()
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


# The freshness table


@main.group()
def imports() -> None:
    """The freshness table, place_imports: what is loaded, on its way or failed, per (area, category)."""


@imports.command("status")
@click.option(
    "--campaign", "campaign_ids", type=int, multiple=True, help="Where these campaigns stand in line (repeatable)."
)
def imports_status(campaign_ids: tuple[int, ...]) -> None:
    """Per category: pairs fresh, on their way, failed and stale, and the oldest release still loaded; then
    where campaigns stand in the import queue's fair-share line."""
    now = datetime.now(UTC)
    store = open_configured_store()
    statuses = store.import_status(now)
    if not statuses:
        click.echo("Nothing imported or asked for yet.")
    else:
        rows = [
            [
                s.category,
                s.fresh,
                s.coming,
                s.failed,
                s.stale,
                f"{s.oldest_release_at:%Y-%m-%d} ({(now - s.oldest_release_at).days} days ago)"
                if s.oldest_release_at
                else "-",
            ]
            for s in statuses
        ]
        click.echo(columns(["category", "fresh", "on their way", "failed", "stale", "oldest loaded"], rows), nl=False)
        click.echo(
            f"fresh: loaded less than {FRESH_DAYS} days ago. on their way: asked for less than {IMPORT_HOURS} h ago. "
            f"failed: the import failed, or did not finish within {IMPORT_HOURS} h; not asked for again until "
            f"{RETRY_DAYS} days after (`nakodo imports retry` now). stale: loaded {FRESH_DAYS} days ago or more, or "
            f"failed {RETRY_DAYS} days ago or more: imported again when a campaign needs it."
        )
        _echo_failed_pairs(store, now)
        _echo_held_pairs(store)
    _echo_import_line(store, now, list(campaign_ids) or None)


def _echo_held_pairs(store: Store) -> None:
    """The pairs the drift gate holds, each with its numbers, why, and how to accept it."""
    held = store.held_imports()
    if not held:
        return
    click.echo(
        f"\nHeld at the drift gate ({plural(len(held), 'pair')}): a newer release moved too far from the places the "
        "pair holds, so campaigns keep the previous release's places until an analyst accepts or a later release "
        "passes. A hold is not a failure: the pair is read again with the release after next."
    )
    reasons = {reason: number for number, reason in enumerate(dict.fromkeys(h.reasons for h in held), start=1)}
    rows = [
        [
            h.category,
            h.area,
            f"{h.drift.kept_release}: {h.drift.before:,}",
            f"{h.drift.release}: {h.drift.after:,}",
            f"{h.drift.count_change:+.0%}",
            f"{h.drift.kept_share:.0%}",
            "-"
            if h.drift.confidence_shift is None
            else f"{h.drift.confidence_before:.2f} -> {h.drift.confidence_after:.2f}",
            f"[{reasons[h.reasons]}]",
            _utc(h.held_at),
            accept_command(h.area, h.category),
        ]
        for h in held
    ]
    click.echo(
        columns(
            [
                "category",
                "area",
                "places kept",
                "places held",
                "count",
                "kept by id",
                "median confidence",
                "why",
                "held",
                "to accept",
            ],
            rows,
        ),
        nl=False,
    )
    for reason, number in reasons.items():
        click.echo(f"[{number}] {reason}")


# Failed pairs listed by `imports status`, oldest first.
_FAILED_LISTED = 20


def _echo_failed_pairs(store: Store, now: datetime) -> None:
    """The failed pairs campaigns need, each with when and why it failed, when the import sensor asks for it again
    and how to retry now."""
    coverage = store.coverage(now, _FAILED_LISTED)
    failed = [pair for pair in coverage.listed if pair.state == "failed" and pair.imported_at is not None]
    if not failed:
        return
    click.echo(f"\nFailed imports campaigns need ({plural(coverage.counts['failed'], 'pair')}):")
    # Each reason once, in full under the table (a table cuts long cells): a run's pairs share theirs.
    reasons = {
        reason: number
        for number, reason in enumerate(dict.fromkeys(failure_reason(p.failure) for p in failed), start=1)
    }
    rows = [
        [
            pair.category,
            pair.area,
            # A lost import is known to have failed once its IMPORT_HOURS are over.
            _utc(pair.imported_at if pair.failure else pair.imported_at + timedelta(hours=IMPORT_HOURS)),
            f"[{reasons[failure_reason(pair.failure)]}]",
            _utc(retry_allowed_at(pair.imported_at)),
            f"nakodo imports retry {pair.area} {pair.category}",
        ]
        for pair in failed
    ]
    click.echo(columns(["category", "area", "failed", "why", "asked again from", "to retry now"], rows), nl=False)
    for reason, number in reasons.items():
        click.echo(f"[{number}] {reason}")
    if coverage.counts["failed"] > len(failed):
        click.echo(f"and {coverage.counts['failed'] - len(failed):,} more (the coverage check in Dagster lists them)")


# Campaigns listed by `imports status` without --campaign: those still waiting for their first businesses.
_LINE_LISTED = 20
_FIRST_PAIR_WORDS = {
    "fresh": "first businesses loaded",
    "coming": "first block queued or running",
    "failed": "first block failed (`nakodo imports retry`)",
}


def _echo_import_line(store: Store, now: datetime, campaign_ids: list[int] | None) -> None:
    blocks, lines = store.import_line(now, campaign_ids)
    click.echo(
        f"\nImport line: {blocks:,} {'block waits' if blocks == 1 else 'blocks wait'} for the queue. Accounts take "
        "turns, and each campaign's first block (its centre, its first category) goes before older campaigns' other "
        "blocks and overtakes queued runs (dagster/priority 1); the queue holds about "
        f"{settings.value('NAKODO_IMPORT_QUEUE_MINUTES')} minutes of work."
    )
    if campaign_ids is None:
        lines = [line for line in lines if line.first_pair != "fresh"]
    if not lines:
        click.echo("No active campaign waits for its first businesses.")
        return
    rows = [
        [
            line.campaign_id,
            line.name,
            line.account,
            _FIRST_PAIR_WORDS.get(line.first_pair)
            or (f"first block {line.place:,} of {blocks:,} in line" if line.place else "first block waits for a tick"),
            line.blocks_waiting,
        ]
        for line in lines[: _LINE_LISTED if campaign_ids is None else None]
    ]
    click.echo(columns(["campaign", "name", "account", "first businesses", "blocks in line"], rows), nl=False)
    if campaign_ids is None and len(lines) > _LINE_LISTED:
        click.echo(f"and {len(lines) - _LINE_LISTED:,} more: `nakodo imports status --campaign ID` for one campaign")


@imports.command("retry")
@click.argument("area")
@click.argument("category")
def imports_retry(area: str, category: str) -> None:
    """Override the 7-day block on a failed import of AREA and CATEGORY.

    The failed import's mark is deleted, so the pair is missing again: the next import sensor tick or
    `nakodo sync` imports it (batched with anything else missing). AREA is a key such
    as cell:53.5,-2 or country:FR, as `dagster` and `imports status` show them; CATEGORY e.g. cafe.
    """
    area = parse_area_key(area).key
    (category,) = check_categories([category])
    store = open_configured_store()
    now = datetime.now(UTC)
    forgotten = store.forget_failed_import(area, category, now)
    if forgotten is not None:
        click.echo(
            f"Forgot the failed import of {category} in {area} ("
            + (
                f"failed {_utc(forgotten.imported_at)}: {forgotten.failure}"
                if forgotten.failure
                else f"asked for {_utc(forgotten.imported_at)}, never finished"
            )
            + "): the next import sensor tick or `nakodo sync` imports it again."
        )
        return
    rows = store.import_rows([area], [category])
    if not rows:
        click.echo(
            f"{category} in {area} was never imported nor asked for: the next sync imports it if a campaign needs it."
        )
        return
    (row,) = rows
    age = now - row.imported_at
    if row.release == REQUESTED:
        raise click.ClickException(
            f"an import of {category} in {area} is on its way (asked for {_hours(age)} ago); it counts as failed "
            f"after {IMPORT_HOURS} h, and only then can it be retried"
        )
    if age >= timedelta(days=FRESH_DAYS):
        click.echo(f"{category} in {area} is stale (release {row.release}): the next sync imports it again.")
        return
    raise click.ClickException(
        f"{category} in {area} did not fail: release {row.release} was loaded {age.days} days ago. To re-import a "
        "loaded pair on purpose, materialise its places partition in the Dagster UI"
    )


@imports.command("accept")
@click.argument("area")
@click.argument("category")
def imports_accept(area: str, category: str) -> None:
    """Accept the rows the drift gate holds for AREA and CATEGORY.

    The held release's places replace the pair's places at once, and the campaigns' next searches read them.
    `nakodo imports status` lists the held pairs and their numbers. AREA is a key such as cell:53.5,-2 or
    country:FR; CATEGORY e.g. cafe.
    """
    area = parse_area_key(area).key
    (category,) = check_categories([category])
    accepted = open_configured_store().accept_held(area, category)
    drift = accepted.drift
    click.echo(
        f"Accepted release {drift.release} for {category} in {area}: its {drift.after:,} places replace release "
        f"{drift.kept_release}'s {drift.before:,} ({drift.in_words()}). Held because: {accepted.reasons}."
    )
    # Dagster is imported only here: the other `imports` commands start fast without it.
    import dagster as dg

    from nakodo_dagster.assets.places import NEW_RELEASE_WITHIN_DRIFT_GATE, record_accepted

    home = dagster_home()
    with dg.DagsterInstance.get() as instance:
        record_accepted(instance, accepted)
    click.echo(f"The pair's check {NEW_RELEASE_WITHIN_DRIFT_GATE} passes again in the Dagster instance at {home}.")


def _utc(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def _hours(age: timedelta) -> str:
    return f"{age.total_seconds() / 3600:.1f} h"


if __name__ == "__main__":
    main()
