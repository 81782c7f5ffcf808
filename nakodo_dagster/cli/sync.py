"""``nakodo sync``: the Dagster definitions run headless, in this process: imports, then searches."""

from __future__ import annotations

import contextlib
import os
import sys

import click
from tqdm import tqdm

from nakodo_dagster import settings
from nakodo_dagster.cli.shared import NakodoCommand, dagster_home, open_configured_store
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.releases import resolve_release
from nakodo_dagster.placement import RETRY_DAYS
from nakodo_dagster.words import plural

SYNC_LOG = "nakodo_sync.log"


@click.command(cls=NakodoCommand)
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

        # The code location's own resources, so that a sync reads and writes exactly what the daemon's runs do; the
        # store named in the environment even when it is the default one, for the release index found beside it.
        os.environ["NAKODO_DATABASE"] = settings.value("NAKODO_DATABASE")
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
