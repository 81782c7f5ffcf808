"""``nakodo imports``: the freshness table (what is loaded, on its way, failed or held), and overriding it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import click

from nakodo_dagster import settings
from nakodo_dagster.cli.shared import NakodoGroup, dagster_home, open_configured_store, utc_day, utc_minute
from nakodo_dagster.drift import accept_command
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.export import columns
from nakodo_dagster.overture.releases import resolve_release
from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    REQUESTED,
    RETRY_DAYS,
    check_categories,
    failure_reason,
    parse_area_key,
    retry_allowed_at,
)
from nakodo_dagster.roll_out import roll_out
from nakodo_dagster.store import Store
from nakodo_dagster.words import plural


@click.group(cls=NakodoGroup)
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
                f"{utc_day(s.oldest_release_at)} ({(now - s.oldest_release_at).days} days ago)"
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
        _echo_releases(store)
        _echo_roll_out(store, now)
        _echo_failed_pairs(store, now)
        _echo_held_pairs(store)
    _echo_import_line(store, now, list(campaign_ids) or None)


def _echo_releases(store: Store) -> None:
    """How far each release has reached: the pairs whose places come from it, and those of it held."""
    releases = store.release_pairs()
    if not releases:
        return
    click.echo(
        "\nReleases, newest first: the pairs whose places come from each, read or carried over unread (its changelog "
        "listed no change in their cells), and the pairs of it held at the drift gate."
    )
    rows = [[r.release, f"{r.pairs:,}", f"{r.pairs - r.carried:,}", f"{r.carried:,}", f"{r.held:,}"] for r in releases]
    click.echo(columns(["release", "pairs", "read", "carried over", "held"], rows), nl=False)


def _echo_roll_out(store: Store, now: datetime) -> None:
    """How far the release the import sensor reads has reached, when the rest move, and how to move them now."""
    root = settings.value("NAKODO_OVERTURE_ROOT").strip()
    if not root:
        return
    try:
        release = resolve_release(root, settings.value("NAKODO_OVERTURE_RELEASE").strip() or None)
    except InvalidInput as error:
        click.echo(f"\nThe release the import sensor reads cannot be found: {error}")
        return
    click.echo(f"\nRoll-out. {store.roll_out_status(release, now).in_words()}")


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
            utc_minute(h.held_at),
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
            utc_minute(pair.imported_at if pair.failure else pair.imported_at + timedelta(hours=IMPORT_HOURS)),
            f"[{reasons[failure_reason(pair.failure)]}]",
            utc_minute(retry_allowed_at(pair.imported_at)),
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


@imports.command("roll-out")
@click.argument("release")
@click.option("--campaign", "campaign_id", type=int, help="The pairs of this active campaign.")
@click.option("--category", help="The pairs of this category that active campaigns need.")
@click.option("--all", "everything", is_flag=True, help="Every pair active campaigns need.")
def imports_roll_out(release: str, campaign_id: int | None, category: str | None, everything: bool) -> None:
    """Move chosen pairs to RELEASE now, rather than as each turns 35 days old.

    RELEASE is the release the import sensor reads (NAKODO_OVERTURE_RELEASE if set, else the newest under
    NAKODO_OVERTURE_ROOT), by name or as `newest`. The pairs (exactly one of --campaign, --category, --all) are
    asked for at the import sensor's next ticks, or by `nakodo sync`: through the import queue in fair-share order,
    each run past the drift gate. Pairs already on it, on their way, failed or held at its gate are left as they
    are. The Dagster UI's job roll_out_release does the same.
    """
    store = open_configured_store()
    chosen, asked = roll_out(
        store,
        settings.value("NAKODO_OVERTURE_ROOT"),
        settings.value("NAKODO_OVERTURE_RELEASE"),
        release,
        campaign_id=campaign_id,
        category=category,
        everything=everything,
    )
    if asked:
        click.echo(
            f"Asked {plural(asked, 'pair')} to move to release {chosen} now: the import sensor's next ticks (or "
            "`nakodo sync`) ask for them through the import queue, accounts taking turns, each past the drift gate."
        )
    else:
        click.echo(
            f"No pair to move to release {chosen}: the pairs chosen are on it already, on their way, failed, held at "
            "its drift gate, or not needed by an active campaign."
        )
    click.echo(store.roll_out_status(chosen, datetime.now(UTC)).in_words())


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
                f"failed {utc_minute(forgotten.imported_at)}: {forgotten.failure}"
                if forgotten.failure
                else f"asked for {utc_minute(forgotten.imported_at)}, never finished"
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

    from nakodo_dagster.imports.events import NEW_RELEASE_WITHIN_DRIFT_GATE, record_accepted

    home = dagster_home()
    with dg.DagsterInstance.get() as instance:
        record_accepted(instance, accepted)
    click.echo(f"The pair's check {NEW_RELEASE_WITHIN_DRIFT_GATE} passes again in the Dagster instance at {home}.")


def _hours(age: timedelta) -> str:
    return f"{age.total_seconds() / 3600:.1f} h"
