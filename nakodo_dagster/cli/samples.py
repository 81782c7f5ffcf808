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
) -> None:
    """Write a sample places release under DIRECTORY in Overture's layout; print the release's folder last.

    With --drop or --inflate it is the next release after the one the same options write without them: the same
    places by id, a month's churn (3% gone, as many new), and the chosen categories dropped or inflated, as a bad
    release does; for trying the drift gate."""
    drift = ReleaseDrift(drop, inflate) if drop or inflate else None
    click.echo(str(write_sample_release(directory, release, rows, files, row_group_rows, schema, seed, drift=drift)))


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
    click.echo(f"Store ready: {settings.value('NAKODO_DATABASE')}")
