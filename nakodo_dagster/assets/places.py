"""Overture's businesses, one partition per (area, category), imported a block or a country per run."""

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.imports import ImportOutcome, PairReport, execute_import
from nakodo_dagster.overture.faults import ReadFailed, classify
from nakodo_dagster.partitions import AREA, CATEGORY, PLACES_PARTITIONS, places_partition
from nakodo_dagster.placement import REQUESTED, RETRY_DAYS, ImportRun, check_categories, import_runs, parse_area_key
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import Store
from nakodo_dagster.words import plural

PLACES = dg.AssetKey("places")
# Every import run, whoever launched it (sensor, UI, CLI), takes a slot of this pool; dagster.yaml sets two.
IMPORT_POOL = "overture_import"

PLACES_INSIDE_THEIR_AREA = "places_inside_their_area"
# A check on places as a whole, defined and recorded in assets/coverage.py; named here for the description.
NEEDED_PAIRS_FRESH_OR_COMING = "needed_pairs_fresh_or_coming"

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
    ]


_SIZE_UNITS = ((1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def _size(count: int) -> str:
    for scale, unit in _SIZE_UNITS:
        if count >= scale:
            return f"{count / scale:,.1f} {unit}"
    return f"{count:,} bytes"


def pair_metadata(outcome: ImportOutcome, pair: PairReport) -> dict[str, object]:
    """What the UI shows for one imported pair: its places (0 is a result, said in words) and what its run read."""
    west, south, east, north = outcome.run.bbox
    stats = outcome.read.stats
    metadata: dict[str, object] = {
        "dagster/row_count": pair.rows,
        "result": f"{pair.rows:,} places"
        if pair.rows
        else f"no {pair.category} in {pair.area} in this release: a result, not a gap",
        "release": outcome.release,
        "run_box": f"{west}, {south}, {east}, {north}",
        "run_areas": len(outcome.run.areas),
        "run_categories": ", ".join(outcome.run.categories),
        "run_rows_read": stats.rows,
        "run_seconds": round(outcome.seconds, 3),
    }
    # Only what the read measured: a local read counts no HTTP requests, and an unindexed one no bytes.
    if stats.bytes_read is not None:
        metadata["run_read"] = _size(stats.bytes_read)
        metadata["run_bytes_read"] = stats.bytes_read
    if stats.requests is not None:
        metadata["run_http_requests"] = stats.requests
    if other := outcome.replaced_marks.get((pair.area, pair.category)):
        metadata["replaced_mark"] = _replaced(other)
    return metadata


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


def import_events(outcome: ImportOutcome) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """Two events per pair the run wrote, each a write to Dagster's event log: its materialisation, then its
    check's evaluation."""
    for pair in outcome.pairs:
        partition = str(places_partition(pair.area, pair.category))
        yield dg.AssetMaterialization(asset_key=PLACES, partition=partition, metadata=pair_metadata(outcome, pair))
        passed, metadata = _inside_their_area(pair)
        yield dg.AssetCheckEvaluation(
            asset_key=PLACES,
            check_name=PLACES_INSIDE_THEIR_AREA,
            passed=passed,
            metadata=metadata,
            partition=partition,
        )


def import_or_release_marks(
    run: ImportRun,
    store: Store,
    overture: OvertureResource,
    stamp: datetime | None,
    release: str | None = None,
) -> ImportOutcome:
    """Import the run. If it fails, its own marks (``stamp``) read as failed at once, so no campaign waits six
    hours on it; if it is cancelled or interrupted, they are taken back, since it never tried to the end.

    ``stamp`` is None for a run launched without one (by hand from the launchpad): it holds no marks. Without
    ``release``, the release is looked up here, so that a root or release that cannot be read fails the pairs
    like any other failed read.
    """
    try:
        release = release or overture.current_release()
        return execute_import(run, store, overture, release, stamp)
    except (dg.DagsterExecutionInterruptedError, KeyboardInterrupt):
        if stamp is not None:
            store.take_back(run.pairs, stamp)
        raise
    except Exception as exc:
        failure = import_failure(run, release, exc)
        if stamp is not None:
            store.mark_failed(run.pairs, stamp, datetime.now(UTC), failure_headline(failure))
        raise failure from exc


def import_failure(run: ImportRun, release: str | None, error: Exception) -> dg.Failure:
    """The step's failure: its first line says what failed, naming the release and the file; then what happens
    next; the failed pairs and the file as metadata."""
    fault = error.fault if isinstance(error, ReadFailed) else classify(error)
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


def run_stamp(run: dg.DagsterRun) -> datetime | None:
    """The stamp of the marks a run holds (its STAMP tag), or None if it holds none."""
    value = run.tags.get(tags.STAMP)
    return tags.stamp_from_tag(value) if value else None


def _was(store: Store, area: str, category: str, now: datetime) -> str:
    """What the pair had before a re-import by hand, in words."""
    rows = store.import_rows([area], [category])
    if not rows:
        return "never imported"
    (row,) = rows
    when = f"{row.imported_at.astimezone(UTC):%Y-%m-%d %H:%M} UTC"
    if row.release == REQUESTED and row.failure:
        return f"an import that failed at {when}: {row.failure}"
    if row.release == REQUESTED:
        return f"an import asked for at {when} ({(now - row.imported_at).total_seconds() / 3600:.1f} h ago), not loaded"
    return f"release {row.release}, {row.rows:,} places, loaded at {when}"


# The UI lists as automations only sensors that launch runs of the asset itself; import_sensor launches the op job
# import_places, so the description names it.
PLACES_DESCRIPTION = (
    "Overture's open businesses of one area and one category, as campaigns search them. Fed by import_sensor: one "
    "import_places run per 4 x 4 block of cells or per country, two at a time; materialising a partition here "
    "re-imports that pair by hand. A failed import shows its pairs as failed partitions (import_failure_sensor). "
    "The partitions are every area times every category; how the pairs campaigns need stand is the check "
    # A link in the description puts each failed, stale or coming pair two clicks from this page: the check, then
    # the pair's link in its metadata.
    f"[{NEEDED_PAIRS_FRESH_OR_COMING}](/assets/{PLACES.to_user_string()}?view=checks&checkDetail="
    f"{NEEDED_PAIRS_FRESH_OR_COMING}), which lists them, each a link to its partition."
)


@dg.asset(
    partitions_def=PLACES_PARTITIONS,
    check_specs=PLACES_CHECKS,
    pool=IMPORT_POOL,
    group_name="overture",
    kinds={"duckdb", "parquet"},
    description=PLACES_DESCRIPTION,
)
def places(
    context: dg.AssetExecutionContext, store: StoreResource, overture: OvertureResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Re-import one pair by hand, whatever its state; see PLACES_DESCRIPTION."""
    keys = context.partition_key.keys_by_dimension
    area = parse_area_key(keys[AREA])
    (category,) = check_categories([keys[CATEGORY]])
    if overture.off_reason:
        raise dg.Failure(f"Imports are off: {overture.off_reason}. Set it to a folder or an s3:// prefix of releases.")
    release = overture.current_release()
    now = datetime.now(UTC)
    was = _was(store.store, area.key, category, now)
    context.log.info(
        f"Re-importing {category} in {area.key} from release {release} by hand; the pair had {was}. "
        "A re-import by hand overrides a mark on its way and a failed import's 7-day block."
    )
    stamp = store.store.force_request([(area.key, category)], now)
    # The stamp on the run is how the sensors find this run's mark: to mark it failed if the run is killed, to take
    # it back if it is cancelled, and to see that the mark has a run.
    context.instance.add_run_tags(context.run.run_id, {tags.STAMP: tags.stamp_tag(stamp)})
    (run,) = import_runs({area.key: [category]}, {area.key: area})
    outcome = import_or_release_marks(run, store.store, overture, stamp, release)
    if warning := replaced_marks_warning(outcome):
        context.log.warning(warning)
    (pair,) = outcome.pairs
    passed, metadata = _inside_their_area(pair)
    yield dg.MaterializeResult(metadata={**pair_metadata(outcome, pair), "replaced": was})
    yield dg.AssetCheckResult(check_name=PLACES_INSIDE_THEIR_AREA, passed=passed, metadata=metadata)
