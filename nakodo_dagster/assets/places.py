"""Overture's businesses, one partition per (area, category), imported a block or a country per run."""

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster.imports import ImportOutcome, PairReport, execute_import
from nakodo_dagster.partitions import AREA, CATEGORY, PLACES_PARTITIONS, places_partition
from nakodo_dagster.placement import ImportRun, check_categories, import_runs, parse_area_key
from nakodo_dagster.resources import OvertureResource, StoreResource

PLACES = dg.AssetKey("places")
# Every import run, whoever launched it (sensor, UI, CLI), takes a slot of this pool; dagster.yaml sets two.
IMPORT_POOL = "overture_import"
IMPORT_KEY_TAG = "nakodo/import_key"
# dagster.yaml's run queue lets two runs with this tag run at once.
IMPORT_KIND_TAG = "nakodo/kind"

PLACES_INSIDE_THEIR_AREA = "places_inside_their_area"
NO_PLACE_TWICE_IN_A_PAIR = "no_place_twice_in_a_pair"
ROW_COUNT_MATCHES_TABLE = "row_count_matches_table"

# Checks per (area, category) partition are a Dagster preview; they are what makes a failed pair visible.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", "Specifying a partitions_def on an AssetCheckSpec", dg.PreviewWarning)
    PLACES_CHECKS = [
        dg.AssetCheckSpec(
            PLACES_INSIDE_THEIR_AREA,
            asset=PLACES,
            partitions_def=PLACES_PARTITIONS,
            description="Every place of a pair lies in its cell, or in its country's box with that address country.",
        ),
        dg.AssetCheckSpec(
            NO_PLACE_TWICE_IN_A_PAIR,
            asset=PLACES,
            partitions_def=PLACES_PARTITIONS,
            description="The read returned each Overture id at most once for the pair.",
        ),
        dg.AssetCheckSpec(
            ROW_COUNT_MATCHES_TABLE,
            asset=PLACES,
            partitions_def=PLACES_PARTITIONS,
            description="The rows reported in the materialisation are the rows the places table holds for the pair.",
        ),
    ]


def _pair_metadata(outcome: ImportOutcome, pair: PairReport) -> dict:
    west, south, east, north = outcome.run.bbox
    return {
        "release": outcome.release,
        "rows": pair.rows,
        "box": f"{west}, {south}, {east}, {north}",
        "run_areas": len(outcome.run.areas),
        "run_categories": ", ".join(outcome.run.categories),
        "rows_read": outcome.read.stats.rows,
        "bytes_read": outcome.read.stats.bytes_read,
        "requests": outcome.read.stats.requests,
        "seconds": round(outcome.seconds, 3),
    }


def _check_facts(pair: PairReport) -> list[tuple[str, bool, dict]]:
    return [
        (PLACES_INSIDE_THEIR_AREA, pair.outside_area == 0, {"outside": pair.outside_area}),
        (NO_PLACE_TWICE_IN_A_PAIR, pair.duplicate_ids == 0, {"duplicate_ids": pair.duplicate_ids}),
        (
            ROW_COUNT_MATCHES_TABLE,
            pair.rows == pair.stored_rows,
            {"reported": pair.rows, "in_table": pair.stored_rows},
        ),
    ]


def import_events(outcome: ImportOutcome) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """A materialisation of every pair the run wrote, each followed by its check evaluations."""
    for pair in outcome.pairs:
        partition = places_partition(pair.area, pair.category)
        yield dg.AssetMaterialization(asset_key=PLACES, partition=partition, metadata=_pair_metadata(outcome, pair))
        for name, passed, metadata in _check_facts(pair):
            yield dg.AssetCheckEvaluation(
                asset_key=PLACES, check_name=name, passed=passed, metadata=metadata, partition=str(partition)
            )


def import_or_mark_failed(
    run: ImportRun, store: StoreResource, overture: OvertureResource, release: str | None = None
) -> ImportOutcome:
    """Import the run; if it fails, its marks read as failed at once so no campaign waits six hours on it.

    Without ``release``, the release is looked up here, so that a root or release that cannot be read fails
    the pairs like any other failed read.
    """
    try:
        release = release or overture.current_release()
        return execute_import(run, store.store, overture, release, datetime.now(UTC))
    except Exception:
        store.store.mark_failed(run.pairs, datetime.now(UTC))
        raise


class ImportRunConfig(dg.Config):
    """The canonical payload of one import run, as the import sensor built it."""

    areas: list[str]
    categories: list[str]
    bbox: list[float]
    country_code: str | None = None
    pairs: list[list[str]]


@dg.op(pool=IMPORT_POOL)
def import_block(
    context: dg.OpExecutionContext, config: ImportRunConfig, store: StoreResource, overture: OvertureResource
) -> None:
    """Read one 4 x 4 block (or one country) from the release and replace the pairs it reserved."""
    run = ImportRun.from_payload(config.model_dump())
    context.log.info(f"Reading {len(run.pairs)} pairs in box {run.bbox}")
    outcome = import_or_mark_failed(run, store, overture)
    context.log.info(
        f"Wrote {sum(p.rows for p in outcome.pairs)} places from release {outcome.release} in {outcome.seconds:.1f} s"
    )
    for event in import_events(outcome):
        context.log_event(event)


@dg.job(
    tags={IMPORT_KIND_TAG: "import"},
    executor_def=dg.in_process_executor,
    description="Import one block of cells or one country into places.",
)
def import_places() -> None:
    import_block()


@dg.asset(
    partitions_def=PLACES_PARTITIONS,
    check_specs=PLACES_CHECKS,
    pool=IMPORT_POOL,
    group_name="overture",
    kinds={"duckdb", "parquet"},
)
def places(
    context: dg.AssetExecutionContext, store: StoreResource, overture: OvertureResource
) -> Iterator[dg.MaterializeResult | dg.AssetCheckResult]:
    """Overture's open businesses of one area and one category, as campaigns search them."""
    keys = context.partition_key.keys_by_dimension
    area = parse_area_key(keys[AREA])
    (category,) = check_categories([keys[CATEGORY]])
    if overture.off_reason:
        raise dg.Failure(f"Imports are off: {overture.off_reason}. Set it to a folder or an s3:// prefix of releases.")
    release = overture.current_release()
    # Re-materialising by hand deliberately overrides the 7-day block on a failed pair.
    store.store.force_request([(area.key, category)], datetime.now(UTC))
    (run,) = import_runs({area.key: [category]}, {area.key: area})
    outcome = import_or_mark_failed(run, store, overture, release)
    (pair,) = outcome.pairs
    yield dg.MaterializeResult(metadata=_pair_metadata(outcome, pair))
    for name, passed, metadata in _check_facts(pair):
        yield dg.AssetCheckResult(check_name=name, passed=passed, metadata=metadata)
