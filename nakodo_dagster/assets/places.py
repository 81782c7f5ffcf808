"""Overture's businesses, one partition per (area, category), imported a block or a country per run."""

import warnings
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime

import dagster as dg
from pydantic import Field

from nakodo_dagster import tags
from nakodo_dagster.assets.coverage import NEEDED_PAIRS_FRESH_OR_COMING, coverage_check_result
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.imports.events import (
    IMPORT_POOL,
    NEW_RELEASE_WITHIN_DRIFT_GATE,
    PLACES,
    PLACES_INSIDE_THEIR_AREA,
    held_warning,
    import_events,
    inside_their_area,
    pair_metadata,
    releases_observation,
    replaced_marks_warning,
    tag_held,
    within_drift_gate,
)
from nakodo_dagster.imports.outcome import ImportOutcome
from nakodo_dagster.imports.run import ImportsInTurn
from nakodo_dagster.partitions import AREA, CATEGORY, PLACES_PARTITIONS
from nakodo_dagster.placement import REQUESTED, check_categories, import_runs, parse_area_key, run_block
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import Store
from nakodo_dagster.words import plural

# A check on places as a whole: places_coverage_sensor (assets/coverage.py) records it whenever it changes.
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
    return coverage_check_result(store, datetime.now(UTC))


def chosen_pairs(partition_keys: Iterable[str]) -> list[tuple[str, str]]:
    """The (area, category) pairs of places partition keys, each checked as strictly as anything a user types. A
    key that is not one (the partition list's "Add partition" takes any text) fails the run before anything is
    marked or read, saying what is wrong and what is allowed."""
    pairs = set()
    for key in partition_keys:
        dimensions = PLACES_PARTITIONS.get_partition_key_from_str(str(key)).keys_by_dimension
        try:
            (category,) = check_categories([dimensions[CATEGORY]])
            pairs.add((parse_area_key(dimensions[AREA]).key, category))
        except InvalidInput as bad:
            raise dg.Failure(
                description=f"places partition {str(key)!r} is not an (area, category) pair, so nothing was "
                f"imported: {bad}. A key added by hand to the partition list names no import; materialise the "
                "partitions of the pairs campaigns need, which the import sensor registers.",
                allow_retries=False,
            ) from None
    return sorted(pairs)


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
# the selection: one per stretch of neighbouring partitions of one category, or of one area (Dagster puts a range
# of keys in a run, and a selection of two dimensions is several ranges), each of at most this many pairs, so that
# a backfill of thousands takes turns with the sensor's runs in the import pool's two slots. Each run re-imports
# its pairs a block or a country at a time, one after the other, holding one slot throughout. A multi-run policy,
# not a single-run one: the launch dialog says what the policy says, and a single-run policy had it promise one run
# for a selection Dagster cannot put in one. Dagster marks the policy beta.
BACKFILL_PAIRS_PER_RUN = 64
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
        backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=BACKFILL_PAIRS_PER_RUN),
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
        imports = ImportsInTurn(runs)
        outcomes: list[ImportOutcome] = []
        drift_output = context.assets_def.get_output_name_for_asset_check_key(
            dg.AssetCheckKey(PLACES, NEW_RELEASE_WITHIN_DRIFT_GATE)
        )
        for number, run, outcome in imports.outcomes(store.store, overture, stamp, release, config.accept, context.log):
            outcomes.append(outcome)
            for warning in (replaced_marks_warning(outcome), held_warning(outcome)):
                if warning:
                    context.log.warning(warning)
            if single:
                (pair,) = outcome.pairs
                passed, metadata = inside_their_area(pair)
                yield dg.MaterializeResult(metadata={**pair_metadata(outcome, pair), "replaced": had[pairs[0]]})
                yield dg.AssetCheckResult(check_name=PLACES_INSIDE_THEIR_AREA, passed=passed, metadata=metadata)
                gate = within_drift_gate(outcome, pair)
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
        if outcomes:
            context.log_event(releases_observation(store.store.release_pairs()))
        if coverage_selected:
            yield needed_pairs_result(store.store)
        imports.raise_failures()
