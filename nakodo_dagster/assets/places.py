"""Overture's businesses, one partition per (area, category), imported a block or a country per run."""

import warnings
from collections.abc import Iterable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import dagster as dg
import duckdb
from pydantic import Field

from nakodo_dagster import tags
from nakodo_dagster.drift import PairDrift, accept_command
from nakodo_dagster.imports import ImportOutcome, PairReport, execute_import
from nakodo_dagster.overture.faults import PASSING_KINDS, ReadFailed, ReadFault, classify
from nakodo_dagster.partitions import AREA, CATEGORY, PLACES_PARTITIONS, places_partition
from nakodo_dagster.placement import (
    REQUESTED,
    RETRY_DAYS,
    ImportRun,
    check_categories,
    import_runs,
    parse_area_key,
    run_block,
)
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.settings import drift_limits
from nakodo_dagster.store import Store, store_unreachable
from nakodo_dagster.store.models import HeldImport
from nakodo_dagster.words import plural

PLACES = dg.AssetKey("places")
# Every import run, whoever launched it (sensor, UI, CLI), takes a slot of this pool; dagster.yaml sets two.
IMPORT_POOL = "overture_import"

PLACES_INSIDE_THEIR_AREA = "places_inside_their_area"
NEW_RELEASE_WITHIN_DRIFT_GATE = "new_release_within_drift_gate"
# A check on places as a whole: places_coverage_sensor (assets/coverage.py) records it whenever it changes.
NEEDED_PAIRS_FRESH_OR_COMING = "needed_pairs_fresh_or_coming"
NEEDED_PAIRS_CHECK = dg.AssetCheckKey(PLACES, NEEDED_PAIRS_FRESH_OR_COMING)

# Checks per (area, category) partition are a Dagster preview; they are what makes a failed pair visible.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Specifying a partitions_def on an AssetCheckSpec", dg.PreviewWarning)
    PLACES_CHECKS = [
        dg.AssetCheckSpec(
            PLACES_INSIDE_THEIR_AREA,
            asset=PLACES,
            partitions_def=PLACES_PARTITIONS,
            description="Every place the reader returned for a pair lies in its cell, or in its country's box with "
            "that address country: a reader that mislabels places (a schema change, the antimeridian, a cell "
            "edge) fails it.",
        ),
        dg.AssetCheckSpec(
            NEW_RELEASE_WITHIN_DRIFT_GATE,
            asset=PLACES,
            partitions_def=PLACES_PARTITIONS,
            description="A pair read from a newer release than the places it holds moved within the drift gate's "
            "limits (count, places kept by id, median confidence; NAKODO_DRIFT_*). A warning when it did not: the "
            "new rows are held, campaigns keep the previous release's places, and the numbers are in the "
            "evaluation. Accept with `nakodo imports accept AREA CATEGORY`, or materialise the partition with the "
            "config accept: true. Evaluated only when there was something to compare.",
        ),
    ]


# A check of places' own op, not an op of its own: a by-hand run of places records it beside the import
# (never a step of its own left skipped, or "Not executing" after a failed import), and executing it alone
# runs places' op with only the check selected, which counts and imports nothing.
NEEDED_PAIRS_SPEC = dg.AssetCheckSpec(
    NEEDED_PAIRS_FRESH_OR_COMING,
    asset=PLACES,
    blocking=False,
    description="Every (area, category) pair an active campaign needs is fresh or has an import on its "
    "way. Counts the needed pairs by state and lists the failed, stale and missing ones with a link to "
    "each partition; pairs no campaign needs are not counted (the partitions tab shows every area times "
    "every category). Recorded by places_coverage_sensor whenever it changes; a warning, since campaigns "
    "still search what is loaded.",
)

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


def _within_drift_gate(outcome: ImportOutcome, pair: PairReport) -> dict[str, object] | None:
    """The drift check's evaluation of a compared pair (passed, severity, metadata), or None if nothing was
    compared."""
    key = (pair.area, pair.category)
    drift = outcome.compared.get(key)
    if drift is None:
        return None
    held = outcome.held.get(key)
    metadata = _drift_numbers(drift)
    metadata["held"] = held is not None
    if held:
        metadata["why"] = held.reasons
        metadata["accept"] = accept_command(pair.area, pair.category)
    if outcome.accepted:
        metadata["accepted"] = "re-imported by hand with accept: true, whatever the limits"
    return {"passed": held is None, "severity": dg.AssetCheckSeverity.WARN, "metadata": metadata}


def _drift_numbers(drift: PairDrift) -> dict[str, object]:
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
    metadata = _drift_numbers(accepted.drift)
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


def _inside_their_area(pair: PairReport) -> tuple[bool, dict[str, object]]:
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
        passed, check_metadata = _inside_their_area(pair)
        yield dg.AssetCheckEvaluation(
            asset_key=PLACES,
            check_name=PLACES_INSIDE_THEIR_AREA,
            passed=passed,
            metadata=check_metadata,
            partition=partition,
        )
        if (gate := _within_drift_gate(outcome, pair)) is not None:
            yield dg.AssetCheckEvaluation(
                asset_key=PLACES, check_name=NEW_RELEASE_WITHIN_DRIFT_GATE, partition=partition, **gate
            )


class Overrun(NamedTuple):
    """When a run passes its maximum runtime, and why its pairs then fail."""

    at: datetime
    reason: str


def import_or_release_marks(
    run: ImportRun,
    store: Store,
    overture: OvertureResource,
    stamp: datetime | None,
    release: str | None = None,
    overrun: Overrun | None = None,
    read_retried: bool = False,
    accept: bool = False,
) -> ImportOutcome:
    """Import the run. If it fails, its own marks (``stamp``) read as failed at once, so no campaign waits six
    hours on it; if it is cancelled or interrupted, they are taken back, since it never tried to the end.

    ``stamp`` is None for a run launched without one (by hand from the launchpad): it holds no marks. Without
    ``release``, the release is looked up here, so that a root or release that cannot be read fails the pairs
    like any other failed read. ``overrun`` is when the run passes its maximum runtime and why that fails it: an
    interrupt from then on is run monitoring stopping a stuck run, and its marks read as failed, since asking for
    the pairs again at once would hold an import slot as long again. ``read_retried`` says the step runs again
    after a transient fault of the release that outlasted the read's own tries (the object store throttling,
    resetting connections or stalling for a minute), or after a file that changed under the read and is unreadable
    since: the marks then stay for that try and ReadFailed is raised.
    ``accept`` lands every pair's rows whatever the drift gate says (an analyst's accepted re-import), measured.
    """
    gate = drift_limits()
    try:
        release = release or overture.current_release()
        return execute_import(run, store, overture, release, stamp, gate, accept)
    except (dg.DagsterExecutionInterruptedError, KeyboardInterrupt):
        _end_interrupted(run, store, stamp, overrun)
        raise
    except Exception as exc:
        interrupt = _interrupt_behind(exc)
        if interrupt is not None:
            _end_interrupted(run, store, stamp, overrun)
            raise interrupt from None
        if store_unreachable(exc):
            # Nothing can be marked in a store out of reach; the step's retry imports under the same marks.
            raise
        fault = exc.fault if isinstance(exc, ReadFailed) else classify(exc)
        if read_retried and fault.kind in PASSING_KINDS:
            # Not the data's fault: marked failed, the pairs would wait 7 days for what the next try fixes.
            raise ReadFailed(fault) from exc
        failure = import_failure(run, release, fault)
        if stamp is not None:
            store.mark_failed(run.pairs, stamp, datetime.now(UTC), failure_headline(failure))
        raise failure from exc


# DuckDB hands on an exception raised in Python during its query (a scan of Arrow data) as duckdb.Error, carrying
# only the exception's class name and message.
_INTERRUPTS: dict[str, type[BaseException]] = {
    "DagsterExecutionInterruptedError": dg.DagsterExecutionInterruptedError,
    "KeyboardInterrupt": KeyboardInterrupt,
}


def _interrupt_behind(error: BaseException) -> BaseException | None:
    """The interrupt that caused ``error``, if one did: a cancel, not a failure to mark for a week. DuckDB answers
    an interrupt arriving during a query with RuntimeError('Query interrupted') raised from it, or with
    duckdb.Error naming it."""
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, (dg.DagsterExecutionInterruptedError, KeyboardInterrupt)):
            return cause
        named = str(cause).partition(":")[0] if isinstance(cause, duckdb.Error) else None
        if named in _INTERRUPTS:
            return _INTERRUPTS[named]()
        cause = cause.__cause__
    return None


def _end_interrupted(run: ImportRun, store: Store, stamp: datetime | None, overrun: Overrun | None) -> None:
    """An interrupted import's marks: failed past its maximum runtime (run monitoring stopped it), else taken back."""
    if stamp is not None:
        now = datetime.now(UTC)
        if overrun is not None and now >= overrun.at:
            store.mark_failed(run.pairs, stamp, now, overrun.reason)
        else:
            store.take_back(run.pairs, stamp)


def import_failure(run: ImportRun, release: str | None, fault: ReadFault) -> dg.Failure:
    """The step's failure: its first line says what failed, naming the release and the file; then what happens
    next; the failed pairs and the file as metadata."""
    pairs = sorted(run.pairs)
    first = pairs[0]
    where = f"Overture release {release}" if release else "The Overture release could not be found"
    retry = f"nakodo imports retry {first[0]} {first[1]}"
    description = (
        f"{where}: {fault.what}\n"
        f"{plural(len(pairs), 'pair')} of this import {'is' if len(pairs) == 1 else 'are'} marked failed; no campaign "
        "waits for them, and the import sensor asks for them again on "
        f"its own after {RETRY_DAYS} days. To retry now: `{retry}`"
        + (f" (and the same for the {plural(len(pairs) - 1, 'other pair')})" if len(pairs) > 1 else "")
        + "."
    )
    metadata: dict[str, dg.RawMetadataValue] = {
        "failed_pairs": dg.MetadataValue.md("\n".join(f"- {category} in {area}" for area, category in pairs)),
        "release": release or "",
        "fault": fault.kind,
        "attempts": fault.attempts,
        "error": f"{type(fault.error).__name__}: {fault.error}"[:2000],
    }
    if fault.file:
        metadata["file"] = fault.file
    return dg.Failure(description=description, metadata=metadata, allow_retries=False)


def failure_headline(failure: dg.Failure) -> str:
    """A step failure's first line: what failed, in plain words, kept with its pairs as their reason."""
    return (failure.description or "the import failed").splitlines()[0]


def run_overrun(context: dg.OpExecutionContext) -> Overrun | None:
    """When the op's run passes its maximum runtime (its MAX_RUNTIME tag, from when it started) and the reason its
    pairs then fail for; None for a run without one, or with one Dagster's run monitoring cannot read either."""
    try:
        seconds = float(context.run.tags[tags.MAX_RUNTIME])
    except (KeyError, ValueError):
        return None
    record = context.instance.get_run_record_by_id(context.run_id)
    if record is None or record.start_time is None:
        return None
    return Overrun(
        datetime.fromtimestamp(record.start_time, UTC) + timedelta(seconds=seconds),
        f"the import did not finish within {seconds / 60:g} minutes of starting and was stopped as stuck",
    )


def run_stamp(run: dg.DagsterRun) -> datetime | None:
    """The stamp of the marks a run holds (its STAMP tag), or None if it holds none."""
    value = run.tags.get(tags.STAMP)
    return tags.stamp_from_tag(value) if value else None


def _had(store: Store, pairs: list[tuple[str, str]], now: datetime) -> dict[tuple[str, str], str]:
    """What each pair had before a re-import by hand, in words."""
    rows = {(r.area, r.category): r for r in store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})}
    held = {(h.area, h.category): h for h in store.held_imports()}
    had = {}
    for pair in pairs:
        row = rows.get(pair)
        if row is None:
            had[pair] = "never imported"
            continue
        when = f"{row.imported_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
        hours = (now - row.imported_at).total_seconds() / 3600
        if row.release == REQUESTED and row.failure:
            had[pair] = f"an import that failed at {when}: {row.failure}"
        elif row.release == REQUESTED:
            had[pair] = f"an import asked for at {when} ({hours:.1f} h ago), not loaded"
        elif pair in held:
            drift = held[pair].drift
            had[pair] = (
                f"release {row.release}, {row.rows:,} places, and release {drift.release}'s {drift.after:,} held at "
                f"the drift gate at {when} ({held[pair].reasons}): it is held again unless run with accept: true"
            )
        else:
            had[pair] = f"release {row.release}, {row.rows:,} places, loaded at {when}"
    return had


def needed_pairs_result(store: Store) -> dg.AssetCheckResult:
    """The check needed_pairs_fresh_or_coming as it stands now."""
    # assets/coverage.py, which counts the pairs and records the check from its sensor, imports this module.
    from nakodo_dagster.assets.coverage import coverage_check_result

    return coverage_check_result(store, datetime.now(UTC))


def chosen_pairs(partition_keys: Iterable[str]) -> list[tuple[str, str]]:
    """The (area, category) pairs of places partition keys, each checked as strictly as anything a user types."""
    pairs = set()
    for key in partition_keys:
        dimensions = PLACES_PARTITIONS.get_partition_key_from_str(str(key)).keys_by_dimension
        (category,) = check_categories([dimensions[CATEGORY]])
        pairs.add((parse_area_key(dimensions[AREA]).key, category))
    return sorted(pairs)


def _several_failed(failures: list[dg.Failure], imports: int) -> dg.Failure:
    """The run's failure when more than one of its imports failed: the first one's, counting the others."""
    first = failures[0]
    return dg.Failure(
        description=f"{len(failures)} of {plural(imports, 'import')} of this run failed; the first:\n"
        f"{first.description}\nThe others' errors are in the run's log.",
        metadata=first.metadata,
        allow_retries=False,
    )


# The page's first words tell the truth about the pairs campaigns need: the partitions tab cannot (Dagster's grid of
# two dimensions is their cross product). import_sensor is listed as this asset's automation (it targets the asset
# job reimport_places too), but the runs it launches are of the op job import_places: the description names both.
PLACES_DESCRIPTION = (
    "Overture's open businesses of one area and one category, as campaigns search them. How the pairs campaigns "
    "need stand (fresh, on their way, failed, stale or missing, with a link to each) is the check "
    # A link in the description puts each failed, stale or coming pair two clicks from this page: the check, then
    # the pair's link in its metadata.
    f"[{NEEDED_PAIRS_FRESH_OR_COMING}](/assets/{PLACES.to_user_string()}?view=checks&checkDetail="
    f"{NEEDED_PAIRS_FRESH_OR_COMING}). The partitions tab counts every area times every category, pairs no "
    "campaign asked for included, so its missing partitions and its percentage filled are not what campaigns lack. "
    "Fed by import_sensor: one import_places run per 4 x 4 block of cells or per country, two at a time; "
    "materialising partitions here (one, or a backfill of many) re-imports them by hand, whatever they hold, a "
    "block or a country at a time. A failed import shows its pairs as failed partitions (import_failure_sensor)."
)


class PlacesConfig(dg.Config):
    """A re-import by hand's run config: set accept to land the new release's rows past the drift gate."""

    accept: bool = Field(
        default=False,
        description="Accept the release's rows even where the drift gate would hold them (count, places kept by id "
        "or median confidence moved past NAKODO_DRIFT_*): an analyst who looked at the held pair's numbers and "
        "judged the release right.",
    )


# A backfill of places partitions, as an analyst launches it from the UI, runs as few runs as Dagster makes of
# the selection (one per stretch of neighbouring partitions of one category, or of one area); each run re-imports
# its pairs a block or a country at a time, one after the other, holding one slot of the import pool throughout.
# Dagster marks the policy beta.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Parameter `backfill_policy`", dg.BetaWarning)

    @dg.multi_asset(
        specs=[
            # Skippable: a run of several partitions records each pair as its import lands, not all at the end.
            dg.AssetSpec(
                PLACES,
                description=PLACES_DESCRIPTION,
                group_name="overture",
                kinds={"duckdb", "parquet"},
                skippable=True,
            )
        ],
        partitions_def=PLACES_PARTITIONS,
        check_specs=[*PLACES_CHECKS, NEEDED_PAIRS_SPEC],
        # The check's output is then optional: such a run reports each pair's check as an evaluation of its own.
        can_subset=True,
        pool=IMPORT_POOL,
        backfill_policy=dg.BackfillPolicy.single_run(),
    )
    def places(
        context: dg.AssetExecutionContext, config: PlacesConfig, store: StoreResource, overture: OvertureResource
    ) -> Iterator[
        dg.MaterializeResult | dg.AssetCheckResult | dg.AssetMaterialization | dg.AssetCheckEvaluation | dg.Output
    ]:
        """Re-import the chosen pairs by hand, whatever their state; see PLACES_DESCRIPTION."""
        coverage_selected = NEEDED_PAIRS_CHECK in context.selected_asset_check_keys
        if PLACES not in context.selected_asset_keys:
            if coverage_selected:
                yield needed_pairs_result(store.store)
            return
        pairs = chosen_pairs(context.partition_keys)
        if overture.off_reason:
            raise dg.Failure(
                f"Imports are off: {overture.off_reason}. Set it to a folder or an s3:// prefix of releases."
            )
        release = overture.current_release()
        now = datetime.now(UTC)
        had = _had(store.store, pairs, now)
        missing: dict[str, list[str]] = {}
        for area, category in pairs:
            missing.setdefault(area, []).append(category)
        runs = import_runs(missing, {})
        # A run of one partition (the UI's Materialize, `dagster asset materialize`) reports through its outputs.
        single = not context.has_partition_key_range
        if single:
            ((area, category),) = pairs
            context.log.info(
                f"Re-importing {category} in {area} from release {release} by hand; the pair had {had[pairs[0]]}. "
                "A re-import by hand overrides a mark on its way and a failed import's 7-day block"
                + (", and the drift gate (accept: true)." if config.accept else ".")
            )
        else:
            context.log.info(
                f"Re-importing {plural(len(pairs), 'pair')} from release {release} by hand, whatever they had, in "
                f"{plural(len(runs), 'import')} (one per 4 x 4 block of cells or country), one after the other."
            )
        stamp = store.store.force_request(pairs, now)
        # The stamp on the run is how the sensors find this run's marks: to mark them failed if the run is killed, to
        # take them back if it is cancelled, and to see that the marks have a run.
        context.instance.add_run_tags(context.run.run_id, {tags.STAMP: tags.stamp_tag(stamp)})
        failures: list[dg.Failure] = []
        outcomes: list[ImportOutcome] = []
        drift_output = context.assets_def.get_output_name_for_asset_check_key(
            dg.AssetCheckKey(PLACES, NEW_RELEASE_WITHIN_DRIFT_GATE)
        )
        for number, run in enumerate(runs, 1):
            try:
                outcome = import_or_release_marks(run, store.store, overture, stamp, release, accept=config.accept)
            except (dg.DagsterExecutionInterruptedError, KeyboardInterrupt):
                # Cancelled: the imports not begun are free at once, as this one's are.
                store.store.take_back([pair for later in runs[number:] for pair in later.pairs], stamp)
                raise
            except dg.Failure as failure:
                # One unreadable block does not keep the others from landing; the run fails at the end, with the
                # first failure (a run of one import fails with it and needs no line of its own).
                if len(runs) > 1:
                    context.log.error(
                        f"Import {number} of {len(runs)} ({run_block(run)}) failed: {failure.description}"
                    )
                failures.append(failure)
                continue
            outcomes.append(outcome)
            for warning in (replaced_marks_warning(outcome), held_warning(outcome)):
                if warning:
                    context.log.warning(warning)
            if single:
                (pair,) = outcome.pairs
                passed, metadata = _inside_their_area(pair)
                yield dg.MaterializeResult(metadata={**pair_metadata(outcome, pair), "replaced": had[pairs[0]]})
                yield dg.AssetCheckResult(check_name=PLACES_INSIDE_THEIR_AREA, passed=passed, metadata=metadata)
                gate = _within_drift_gate(outcome, pair)
                if gate is not None:
                    yield dg.AssetCheckResult(check_name=NEW_RELEASE_WITHIN_DRIFT_GATE, **gate)
                else:
                    # Nothing to compare: the check's output, so that Dagster does not log it as missing.
                    yield dg.Output(None, output_name=drift_output)
                continue
            context.log.info(
                f"Import {number} of {len(runs)} ({run_block(run)}): "
                f"{plural(sum(p.rows for p in outcome.pairs), 'place')} in {plural(len(run.pairs), 'pair')}, "
                f"{outcome.seconds:.1f} s"
            )
            yield from import_events(outcome, had)
        if not single:
            # The check's output, as an AssetCheckResult would give it, so that Dagster does not log it as missing;
            # each pair's evaluation is above.
            check_key = dg.AssetCheckKey(PLACES, PLACES_INSIDE_THEIR_AREA)
            yield dg.Output(None, output_name=context.assets_def.get_output_name_for_asset_check_key(check_key))
            yield dg.Output(None, output_name=drift_output)
        tag_held(context, outcomes)
        if coverage_selected:
            yield needed_pairs_result(store.store)
        if failures:
            raise failures[0] if len(failures) == 1 else _several_failed(failures, len(runs))
