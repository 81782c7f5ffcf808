"""``nakodo``: campaigns, headless runs of the Dagster definitions, results, the freshness table, samples."""

from __future__ import annotations

import os
from pathlib import Path

import click

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.cli import sample_release
from nakodo_dagster.overture.releases import newest_release
from nakodo_dagster.overture.sample import write_sample_release
from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting
from nakodo_dagster.store import Store, open_store

DEFAULT_DATA = Path("data")
DEMO_CAMPAIGNS = (
    ("Leeds cafes and pubs", Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))),
    ("Paris bakeries and restaurants", Targeting((PointLocation(48.8566, 2.3522, 100),), ("bakery", "restaurant"))),
    ("Swiss cafes", Targeting((CountryLocation("CH"),), ("cafe",))),
    ("Fiji restaurants", Targeting((PointLocation(-17.0, 179.97, 50),), ("restaurant",))),
)


def database_url() -> str:
    """NAKODO_DATABASE, or the embedded default: a DuckDB file in the project's data folder."""
    return os.environ.get("NAKODO_DATABASE") or str(DEFAULT_DATA / "nakodo.duckdb")


def open_configured_store() -> Store:
    """The configured store, its schema up to date."""
    store = open_store(database_url())
    store.migrate()
    return store


class NakodoGroup(click.Group):
    """Turns the project's InvalidInput into click's usage error: one clear message, exit code 2."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except InvalidInput as exc:
            raise click.UsageError(str(exc), ctx) from exc


@click.group(cls=NakodoGroup)
def main() -> None:
    """Business listings from Overture Maps for outreach campaigns.

    Configured by NAKODO_DATABASE (a DuckDB file or a postgresql:// URL), NAKODO_OVERTURE_ROOT (a folder
    or an s3:// prefix of releases; unset: imports off) and NAKODO_OVERTURE_RELEASE (default: the newest).
    """


main.add_command(sample_release, "sample-release")


@main.command()
def demo() -> None:
    """Prepare the embedded default: a sample release, the store and demo campaigns (idempotent)."""
    root = os.environ.get("NAKODO_OVERTURE_ROOT") or str(DEFAULT_DATA / "overture")
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
