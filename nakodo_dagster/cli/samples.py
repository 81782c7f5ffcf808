"""``nakodo sample-release`` and ``nakodo demo``: sample data for tests, benchmarks and offline runs."""

from __future__ import annotations

from pathlib import Path

import click

from nakodo_dagster import settings
from nakodo_dagster.cli.shared import NakodoCommand, open_configured_store
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.releases import newest_release
from nakodo_dagster.overture.sample import (
    DEFAULT_FILES,
    DEFAULT_RELEASE,
    DEFAULT_ROWS,
    SCHEMAS,
    ReleaseDrift,
    write_sample_release,
)
from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting
from nakodo_dagster.redact import redacted_url

DEMO_CAMPAIGNS = (
    ("Leeds cafes and pubs", Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))),
    ("Paris bakeries and restaurants", Targeting((PointLocation(48.8566, 2.3522, 100),), ("bakery", "restaurant"))),
    ("Swiss cafes", Targeting((CountryLocation("CH"),), ("cafe",))),
    ("Fiji restaurants", Targeting((PointLocation(-17.0, 179.97, 50),), ("restaurant",))),
)


@click.command("sample-release", cls=NakodoCommand)
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--release", default=DEFAULT_RELEASE, show_default=True, help="Release name, YYYY-MM-DD.N.")
@click.option("--rows", type=int, default=DEFAULT_ROWS, show_default=True, help="Number of places.")
@click.option("--files", type=int, default=DEFAULT_FILES, show_default=True, help="Number of Parquet files.")
@click.option(
    "--row-group-rows", type=int, default=None, help="Places per row group [default: about 256 row groups a file]."
)
@click.option(
    "--schema",
    type=click.Choice(SCHEMAS),
    default="current",
    show_default=True,
    help="current: taxonomy and operating_status (2026-09 on); previous: categories (before 2025-09).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed writes the same places.")
@click.option(
    "--drop",
    multiple=True,
    help="Write the next release after the one these options write without --drop and --inflate: this category "
    "keeps a tenth of its places (repeatable).",
)
@click.option(
    "--inflate",
    multiple=True,
    help="As --drop, but this category gains three new places for each it had (repeatable).",
)
@click.option(
    "--next",
    "next_release",
    is_flag=True,
    help="Write the next release after the one these options write without it: a month's churn, nothing else.",
)
@click.option("--edited", type=float, default=0.0, help="As --next, and this share of the places kept changes.")
@click.option("--reissued", type=float, default=0.0, help="As --next, and this share of them comes under new ids.")
@click.option(
    "--months",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="As --next, this many months on: each month's drift on the one before, the changelog against the last.",
)
@click.option(
    "--changelog",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="With a next release: write its changelog (added, removed, data_changed, unchanged) under this folder.",
)
def sample_release(
    directory: Path,
    release: str,
    rows: int,
    files: int,
    row_group_rows: int | None,
    schema: str,
    seed: int,
    drop: tuple[str, ...],
    inflate: tuple[str, ...],
    next_release: bool,
    edited: float,
    reissued: float,
    months: int,
    changelog: Path | None,
) -> None:
    """Write a sample places release under DIRECTORY in Overture's layout; print the release's folder last.

    With --next, --drop, --inflate, --edited or --reissued it is the next release after the one the same options
    write without them: the same places by id, a month's churn (3% gone, as many new), and the chosen categories
    dropped or inflated, as a bad release does (for trying the drift gate). --months writes the release that many
    months on, each month's drift applied to the one before (for following ids over several releases). --changelog
    writes what changed since the month before, by id, as Overture's GERS changelog does."""
    drift = None
    if next_release or drop or inflate or edited or reissued or months > 1:
        drift = [ReleaseDrift(drop, inflate, edited=edited, reissued=reissued)] * months
    folder = write_sample_release(
        directory, release, rows, files, row_group_rows, schema, seed, drift=drift, changelog_root=changelog
    )
    click.echo(str(folder))


@click.command(cls=NakodoCommand)
def demo() -> None:
    """Prepare the embedded default: a sample release, the store and demo campaigns (idempotent)."""
    configured = settings.configured("NAKODO_OVERTURE_ROOT")
    # Unset, the root is data/overture once a release is there (settings' default): the demo writes that release.
    root = str(settings.DATA / "overture") if configured is None else configured.strip()
    if not root:
        click.echo("Imports are off (NAKODO_OVERTURE_ROOT is empty): no sample release written")
    elif "://" not in root:
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
    click.echo(f"Store ready: {redacted_url(settings.value('NAKODO_DATABASE'))}")
