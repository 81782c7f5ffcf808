"""What an import run tells Dagster about the places asset: each pair's materialisation and check evaluations, its
metadata, the run's warnings and its HELD tag. The import_places op and the places asset's re-import by hand both
report through these, so the asset's key, pool and check names live here, below both."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.drift import PairDrift, accept_command
from nakodo_dagster.imports.outcome import ImportOutcome, PairReport
from nakodo_dagster.partitions import places_partition
from nakodo_dagster.store.models import HeldImport, ReleasePairs, RollOut
from nakodo_dagster.words import plural

PLACES = dg.AssetKey("places")
# Every import run, whoever launched it (sensor, UI, CLI), takes a slot of this pool; dagster.yaml sets two.
IMPORT_POOL = "overture_import"

PLACES_INSIDE_THEIR_AREA = "places_inside_their_area"
NEW_RELEASE_WITHIN_DRIFT_GATE = "new_release_within_drift_gate"

_SIZE_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def _size(count: int) -> str:
    for scale, unit in _SIZE_UNITS:
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count:,} bytes"


def pair_metadata(outcome: ImportOutcome, pair: PairReport) -> dict[str, object]:
    """What the UI shows for one imported pair: its places (0 is a result, said in words) and what its run read."""
    west, south, east, north = outcome.run.bbox
    metadata: dict[str, object] = {
        "dagster/row_count": pair.rows,
        "result": f"{pair.rows:,} places"
        if pair.rows
        else f"no {pair.category} in {pair.area} in this release: a result, not a gap",
        "release": outcome.release,
        "run_box": f"{west}, {south}, {east}, {north}",
        "run_areas": len(outcome.run.areas),
        "run_categories": ", ".join(outcome.run.categories),
        "run_rows_read": outcome.read.stats.rows if outcome.read else 0,
        "run_seconds": round(outcome.seconds, 3),
    }
    # Only what the read measured: a local read counts no HTTP requests, and an unindexed one no bytes.
    if outcome.read and outcome.read.stats.bytes_read is not None:
        metadata["run_read"] = _size(outcome.read.stats.bytes_read)
        metadata["run_bytes_read"] = outcome.read.stats.bytes_read
    if outcome.read and outcome.read.stats.requests is not None:
        metadata["run_http_requests"] = outcome.read.stats.requests
    if changes := outcome.changes:
        metadata["run_changelog_read"] = _size(changes.bytes_read)
        metadata["run_pairs_carried_over"] = len(outcome.carried)
    if (pair.area, pair.category) in outcome.carried:
        metadata["carried_over"] = (
            f"not read: release {outcome.release}'s changelog lists no place added, changed or removed here since "
            f"release {outcome.changes.base}, which these places came from"
        )
    if other := outcome.replaced_marks.get((pair.area, pair.category)):
        metadata["replaced_mark"] = _replaced(other)
    if held := outcome.held.get((pair.area, pair.category)):
        drift = held.drift
        metadata |= {
            "dagster/row_count": drift.before,
            "result": f"held: release {drift.release}'s {drift.after:,} places are not loaded ({held.reasons}); "
            f"campaigns keep release {drift.kept_release}'s {drift.before:,} places. Accept: "
            f"`{accept_command(pair.area, pair.category)}`, or materialise this partition with the config accept: true",
            "release": drift.kept_release,
            "held_release": drift.release,
        }
    if drift := outcome.compared.get((pair.area, pair.category)):
        metadata["drift"] = f"against release {drift.kept_release}: {drift.in_words()}"
    return metadata


def within_drift_gate(outcome: ImportOutcome, pair: PairReport) -> dict[str, object] | None:
    """The drift check's evaluation of a compared pair (passed, severity, metadata), or None if nothing was
    compared."""
    key = (pair.area, pair.category)
    drift = outcome.compared.get(key)
    if drift is None:
        return None
    held = outcome.held.get(key)
    metadata = drift_numbers(drift)
    metadata["held"] = held is not None
    if held:
        metadata["why"] = held.reasons
        metadata["accept"] = accept_command(pair.area, pair.category)
    if outcome.accepted:
        metadata["accepted"] = "re-imported by hand with accept: true, whatever the limits"
    return {"passed": held is None, "severity": dg.AssetCheckSeverity.WARN, "metadata": metadata}


def drift_numbers(drift: PairDrift) -> dict[str, object]:
    """A compared pair's numbers, as the drift check shows them."""
    return {
        "release": drift.release,
        "compared_with": drift.kept_release,
        "places_before": drift.before,
        "places_after": drift.after,
        "count_change": f"{drift.count_change:+.1%}",
        "kept_by_id": f"{drift.kept_share:.1%}",
        "median_confidence_before": "none" if drift.confidence_before is None else round(drift.confidence_before, 4),
        "median_confidence_after": "none" if drift.confidence_after is None else round(drift.confidence_after, 4),
    }


def record_accepted(instance: dg.DagsterInstance, accepted: HeldImport) -> None:
    """Record, without a run, that an analyst accepted the held pair from the command line: its drift check passes
    again in the UI, with the numbers it was held for."""
    metadata = drift_numbers(accepted.drift)
    metadata |= {
        "held": False,
        "accepted": f"by `{accept_command(accepted.area, accepted.category)}`, held for: {accepted.reasons}",
    }
    instance.report_runless_asset_event(
        dg.AssetCheckEvaluation(
            asset_key=PLACES,
            check_name=NEW_RELEASE_WITHIN_DRIFT_GATE,
            passed=True,
            severity=dg.AssetCheckSeverity.WARN,
            metadata=metadata,
            partition=str(places_partition(accepted.area, accepted.category)),
        )
    )


def held_warning(outcome: ImportOutcome) -> str | None:
    """The pairs this run held, in one sentence with their numbers; None when it held none."""
    if not outcome.held:
        return None
    pairs = "; ".join(
        f"{category} in {area} ({held.drift.in_words()})" for (area, category), held in sorted(outcome.held.items())
    )
    return (
        f"Held {plural(len(outcome.held), 'pair')} of release {outcome.release} past the drift gate: {pairs}. "
        "Campaigns keep the previous release's places; `nakodo imports status` lists them and `nakodo imports accept "
        "AREA CATEGORY` accepts one."
    )


def tag_held(context: dg.OpExecutionContext, outcomes: Iterable[ImportOutcome]) -> None:
    """Name the run's held pairs in its HELD tag, so that the run list shows them."""
    held = sorted(pair for outcome in outcomes for pair in outcome.held)
    if held:
        value = tags.held_pairs([f"{category} in {area}" for area, category in held])
        context.instance.add_run_tags(context.run.run_id, {tags.HELD: value})


def _replaced(stamp: datetime) -> str:
    return f"another import's, asked for at {stamp.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC and still on its way"


def replaced_marks_warning(outcome: ImportOutcome) -> str | None:
    """Why this run wrote pairs another import had marked, in one sentence; None when it held every mark."""
    if not outcome.replaced_marks:
        return None
    pairs = ", ".join(f"{category} in {area}" for area, category in sorted(outcome.replaced_marks))
    return (
        f"Replaced {plural(len(outcome.replaced_marks), 'pair')} another import was still on its way for ({pairs}): "
        "this run read the same release, so its places stand; that import will write them again when it finishes."
    )


def inside_their_area(pair: PairReport) -> tuple[bool, dict[str, object]]:
    return pair.outside_area == 0, {"places": pair.rows, "outside_their_area": pair.outside_area}


def import_events(
    outcome: ImportOutcome, had: Mapping[tuple[str, str], str] | None = None
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """Two events per pair the run wrote, each a write to Dagster's event log: its materialisation, then its
    check's evaluation; a third, the drift check's, for a pair read from a newer release than it held. ``had``, for a
    re-import by hand, says what each pair had before it."""
    for pair in outcome.pairs:
        partition = str(places_partition(pair.area, pair.category))
        metadata = pair_metadata(outcome, pair)
        if had is not None:
            metadata["replaced"] = had[(pair.area, pair.category)]
        yield dg.AssetMaterialization(asset_key=PLACES, partition=partition, metadata=metadata)
        passed, check_metadata = inside_their_area(pair)
        yield dg.AssetCheckEvaluation(
            asset_key=PLACES,
            check_name=PLACES_INSIDE_THEIR_AREA,
            passed=passed,
            metadata=check_metadata,
            partition=partition,
        )
        if (gate := within_drift_gate(outcome, pair)) is not None:
            yield dg.AssetCheckEvaluation(
                asset_key=PLACES, check_name=NEW_RELEASE_WITHIN_DRIFT_GATE, partition=partition, **gate
            )


def releases_observation(releases: list[ReleasePairs]) -> dg.AssetObservation:
    """How far each release has reached once a run landed, on the places asset's page: the pairs whose places come
    from it, read or carried over unread, and those of it held at the drift gate, newest first, so that a new
    release's roll-out shows."""
    table = [
        "| release | pairs | read | carried over unread | held at the drift gate |",
        "|---|---:|---:|---:|---:|",
        *(f"| {r.release} | {r.pairs:,} | {r.pairs - r.carried:,} | {r.carried:,} | {r.held:,} |" for r in releases),
    ]
    metadata: dict[str, object] = {"releases": dg.MetadataValue.md("\n".join(table))}
    if releases:
        newest, *older = releases
        metadata |= {
            "newest_release": newest.release,
            "newest_release_pairs": newest.pairs,
            "newest_release_carried_over": newest.carried,
            "newest_release_held": newest.held,
            "pairs_on_older_releases": sum(r.pairs for r in older),
        }
    return dg.AssetObservation(asset_key=PLACES, metadata=metadata)


def roll_out_observation(roll_out: RollOut, description: str) -> dg.AssetObservation:
    """An observation on places of how far a release has reached: what the import sensor says once when the release
    appears, and what the roll_out_release job says after asking pairs to move."""
    metadata: dict[str, object] = {
        "release": roll_out.release,
        "pairs_on_release": roll_out.on_release,
        "pairs": roll_out.pairs,
        "pairs_asked_to_move": roll_out.asked,
    }
    if roll_out.last_move_at is not None:
        metadata["last_pair_moves_at"] = dg.MetadataValue.timestamp(roll_out.last_move_at)
    return dg.AssetObservation(asset_key=PLACES, description=description, metadata=metadata)
