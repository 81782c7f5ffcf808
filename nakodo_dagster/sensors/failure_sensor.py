"""Frees an import's marks when the import itself could not: a killed run's read as failed, a cancelled run's
are taken back. Both watch the import sensor's runs and an analyst's runs of the places asset alike."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.assets.places import PLACES, import_places, run_stamp
from nakodo_dagster.partitions import AREA, CATEGORY
from nakodo_dagster.placement import ImportRun
from nakodo_dagster.resources import StoreResource


@dataclass(frozen=True)
class HeldMarks:
    """The (area, category) marks one import run holds: its pairs and the exact stamp it wrote them with."""

    pairs: tuple[tuple[str, str], ...]
    stamp: datetime


def held_marks(run: dg.DagsterRun) -> HeldMarks | None:
    """The marks an import run holds, or None: not an import run, or a run that had not marked anything yet
    (an analyst's run stamps itself only once it starts)."""
    stamp = run_stamp(run)
    if stamp is None:
        return None
    if run.job_name == import_places.name:
        config = run.run_config["ops"]["import_block"]["config"]
        return HeldMarks(ImportRun.from_payload(config).pairs, stamp)
    if run.asset_selection and PLACES in run.asset_selection:
        area, category = (run.tags.get(f"{tags.PARTITION}/{name}") for name in (AREA, CATEGORY))
        if area and category:
            return HeldMarks(((area, category),), stamp)
    return None


# Without monitored_jobs a run status sensor watches every job of the code location: the places asset is
# materialised by hand through Dagster's implicit asset job, which has no definition to name here.
@dg.run_failure_sensor(
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A failed or killed import's marks read as failed at once: campaigns stop waiting and the 7-day "
    "block starts. Watches import_places runs and runs of the places asset.",
)
def import_failure_sensor(context: dg.RunFailureSensorContext, store: StoreResource) -> dg.SkipReason | None:
    marks = held_marks(context.dagster_run)
    if marks is None:
        return dg.SkipReason(f"Run {context.dagster_run.run_id} holds no import marks.")
    marked = store.store.mark_failed(marks.pairs, marks.stamp, datetime.now(UTC))
    context.log.info(
        f"Run {context.dagster_run.run_id} failed: {marked} of its {len(marks.pairs)} marks now read as failed "
        "(the rest were already dated back by the run, or replaced by a newer import)."
    )
    return None


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.CANCELED,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A cancelled import's pairs are free at once, even if it was cancelled while queued and never "
    "ran: it never tried to the end, so the next tick asks for them again.",
)
def import_cancel_sensor(context: dg.RunStatusSensorContext, store: StoreResource) -> dg.SkipReason | None:
    marks = held_marks(context.dagster_run)
    if marks is None:
        return dg.SkipReason(f"Run {context.dagster_run.run_id} holds no import marks.")
    taken = store.store.take_back(marks.pairs, marks.stamp)
    context.log.info(
        f"Run {context.dagster_run.run_id} was cancelled: took back {taken} of its {len(marks.pairs)} marks "
        "(the rest were already taken back by the run, or replaced by a newer import)."
    )
    return None
