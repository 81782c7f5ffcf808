"""Frees an import's marks when the import itself could not: a killed run's read as failed once Dagster runs it
again no more, a cancelled run's are taken back. Both watch the import sensor's runs and an analyst's runs of the
places asset alike. A failed import's pairs are shown as failed partitions of places."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.dagster_internals import (
    JobFailureData,
    SerializableErrorInfo,
    report_partition_planned,
    should_retry,
)
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.imports.run import run_stamp
from nakodo_dagster.jobs.import_places import import_block, import_payload, import_places
from nakodo_dagster.partitions import AREA, CATEGORY, places_partition
from nakodo_dagster.placement import REQUESTED, RETRY_DAYS, ImportRun
from nakodo_dagster.resources import StoreResource
from nakodo_dagster.store import Store

# An exception's message as Dagster keeps it: ``module.Class: words``.
_QUALIFIED_NAME = re.compile(r"^[\w.]+: ")
# The exception's words kept in a failure's one line: enough to tell what broke, short enough to stay one line.
CAUSE_CHARACTERS = 160
# Dagster's own storage out of reach (its PostgreSQL restarted or failed over for longer than the storage's own
# retries), as an exception's message starts: the machinery's fault, not the import's.
_STORAGE_OUTAGES = (
    "dagster_postgres.utils.DagsterPostgresException:",
    "psycopg2.OperationalError:",
    "psycopg2.InterfaceError:",
    "sqlalchemy.exc.OperationalError:",
    "sqlalchemy.exc.InterfaceError:",
)


@dataclass(frozen=True)
class HeldMarks:
    """The (area, category) marks one import run holds: its pairs and the exact stamp it wrote them with."""

    pairs: tuple[tuple[str, str], ...]
    stamp: datetime


def import_job_pairs(run: dg.DagsterRun) -> tuple[tuple[str, str], ...] | None:
    """The pairs a run of the import_places job was to write (from its payload), or None for any other run and
    for a run whose payload is not a valid import (it failed on its config before it touched anything)."""
    if run.job_name != import_places.name:
        return None
    try:
        return ImportRun.from_payload(import_payload(run.run_config)).pairs
    except (InvalidInput, KeyError, TypeError):
        return None


def held_marks(run: dg.DagsterRun, store: Store) -> HeldMarks | None:
    """The marks an import run holds, or None: not an import run, or a run that had not marked anything yet
    (an analyst's run stamps itself only once it starts)."""
    stamp = run_stamp(run)
    if stamp is None:
        return None
    pairs = import_job_pairs(run)
    if pairs is not None:
        return HeldMarks(pairs, stamp)
    if run.asset_selection and PLACES in run.asset_selection:
        area, category = (run.tags.get(f"{tags.PARTITION}/{name}") for name in (AREA, CATEGORY))
        if area and category:
            return HeldMarks(((area, category),), stamp)
        # A run of several partitions (a backfill's) holds the marks still carrying its stamp.
        return HeldMarks(tuple(store.marks_stamped(stamp)), stamp)
    return None


def report_failed_partitions(
    instance: dg.DagsterInstance, run: dg.DagsterRun, pairs: Sequence[tuple[str, str]], store: Store
) -> int:
    """Tell Dagster which partitions of places the failed run was materialising: the UI then shows them as failed
    (planned in a failed run, not materialised since), each a click away from the run and its error, until an
    import loads them. One event per pair, written only when a run fails: a successful import pays nothing for
    it. A pair another import loaded since the run was created is left as it is. Returns how many were reported."""
    record = instance.get_run_record_by_id(run.run_id)
    created = record.create_timestamp if record else datetime.now(UTC)
    rows = {(r.area, r.category): r for r in store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})}
    failed = [
        pair
        for pair in pairs
        if not (pair in rows and rows[pair].release != REQUESTED and rows[pair].imported_at > created)
    ]
    for area, category in failed:
        report_partition_planned(instance, run, import_block.name, PLACES, str(places_partition(area, category)))
    return len(failed)


def _some_of(done: int, held: int, what: str, others: str) -> str:
    """What happened to ``done`` of a run's ``held`` pairs, and that the rest were ``others``, in one sentence:
    "its 2 pairs were marked failed", "1 of its 3 pairs was ...; the other 2 were ...", "its pair was ..."."""
    if done == held:
        subject = "its pair was" if held == 1 else f"its {held} pairs were"
        return f"{subject} {what}."
    rest = held - done
    rest_words = "the other was" if rest == 1 else f"the other {rest} were"
    if done == 0:
        return f"{'its pair was' if held == 1 else f'its {held} pairs were'} {others}."
    return f"{done} of its {held} pairs {'was' if done == 1 else 'were'} {what}; {rest_words} {others}."


def lost_dagster_storage(event: dg.DagsterEvent) -> bool:
    """Whether a run failed because its worker lost Dagster's own storage, in a step or outside any: an import it
    never got to try. A step that fails so fails the run for good (Dagster runs a run whose step failed again no
    more), so without this its pairs would wait 7 days for a restart of Dagster's PostgreSQL."""
    data = event.event_specific_data
    if not isinstance(data, JobFailureData):
        return False
    step_failure = data.first_step_failure_event
    errors = [data.error, step_failure.step_failure_data.error if step_failure is not None else None]
    while errors:
        error = errors.pop()
        if isinstance(error, SerializableErrorInfo):
            if (error.message or "").startswith(_STORAGE_OUTAGES):
                return True
            errors += [error.cause, error.context]
    return False


def run_failure_reason(context: dg.RunFailureSensorContext) -> str:
    """Why a run failed, in one line, for the pairs it held: ``run_failure_headline`` after the run's id."""
    return f"import run {context.dagster_run.run_id} failed: {run_failure_headline(context.failure_event)}"


def run_failure_headline(event: dg.DagsterEvent) -> str:
    """A run failure's first line: Dagster's own words for it (a killed worker, a step that failed), followed by
    the exception's class and first line where the run failed on one outside any step. Dagster's words alone then
    say only "An exception was thrown during execution.": a run worker that lost Dagster's storage (its
    PostgreSQL stopped) fails so, and the reason is what tells it from a bug."""
    message = (event.message or "").strip()
    first = message.splitlines()[0] if message else "no reason given"
    data = event.event_specific_data
    error = data.error if isinstance(data, JobFailureData) else None
    if error is None:
        return first
    # The message starts with the exception's qualified class name, which the class name alone says plainly.
    words = _QUALIFIED_NAME.sub("", (error.message or "").strip()).splitlines()
    cause = f"{error.cls_name}: {words[0]}" if words and error.cls_name else (words[0] if words else error.cls_name)
    if not cause or cause in first:
        return first
    return f"{first.rstrip('.')}: {cause[:CAUSE_CHARACTERS]}"


# Neither sensor answers with a SkipReason, for a run it leaves alone either: Dagster evaluates a run status sensor
# once per run a tick finds, and refuses a tick in which one run gave a SkipReason and another a reaction (None).
# That tick's cursor then never moved past those runs, so every later tick failed the same way.
# Without monitored_jobs a run status sensor watches every job of the code location: the places asset is
# materialised by hand through Dagster's implicit asset job, which has no definition to name here.
@dg.run_failure_sensor(
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A failed or killed import's marks read as failed at once: campaigns stop waiting and the 7-day "
    "block starts; its pairs show as failed partitions of places. Watches import_places runs and runs of the "
    "places asset.",
)
def import_failure_sensor(context: dg.RunFailureSensorContext, store: StoreResource) -> None:
    # Read again: Dagster tags a failed run it will retry just after recording the failure.
    run, now = context.instance.get_run_by_id(context.dagster_run.run_id) or context.dagster_run, datetime.now(UTC)
    marks = held_marks(run, store.store)
    if should_retry(run, context.instance):
        # The retry carries the run's tags, so its stamp: it imports the pairs under the same marks, and only the
        # failure of its last retry marks them failed.
        count = len(marks.pairs) if marks else 0
        held = {0: "it holds no marks", 1: "its pair stays on its way for the retry"}.get(
            count, f"its {count} pairs stay on their way for the retry"
        )
        context.log.info(f"Run {run.run_id} failed and Dagster runs it again: {held}.")
        return
    if marks is not None and lost_dagster_storage(context.failure_event):
        taken = store.store.take_back(marks.pairs, marks.stamp)
        context.log.info(
            f"Run {run.run_id} failed: it lost Dagster's storage, not the import's fault; "
            + _some_of(
                taken, len(marks.pairs), "taken back, to be asked for at the next tick", "loaded or marked since"
            )
        )
    elif marks is not None:
        marked = store.store.mark_failed(marks.pairs, marks.stamp, now, run_failure_reason(context))
        context.log.info(
            f"Run {run.run_id} failed: "
            + _some_of(
                marked,
                len(marks.pairs),
                f"marked failed: no campaign waits for a failed pair, which is asked for again after {RETRY_DAYS} "
                "days (`nakodo imports status` lists the failed pairs and how to retry now)",
                "already marked failed by the run itself, or loaded by a newer import",
            )
        )
    # A run of the places asset was planned partition by partition when it was created; an import_places run
    # was not, so its pairs are reported here, whether or not it held marks (a launchpad run holds none).
    pairs = import_job_pairs(run)
    if pairs is not None:
        shown = report_failed_partitions(context.instance, run, pairs, store.store)
        context.log.info(
            f"Run {run.run_id} failed: "
            + _some_of(shown, len(pairs), "shown as failed on the places page", "loaded by a newer import since")
        )
    elif marks is None:
        context.log.info(f"Run {run.run_id} holds no import marks.")


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.CANCELED,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A cancelled import's pairs are free at once, even if it was cancelled while queued and never "
    "ran: it never tried to the end, so the next tick asks for them again.",
)
def import_cancel_sensor(context: dg.RunStatusSensorContext, store: StoreResource) -> None:
    marks = held_marks(context.dagster_run, store.store)
    if marks is None:
        context.log.info(f"Run {context.dagster_run.run_id} holds no import marks.")
        return
    taken = store.store.take_back(marks.pairs, marks.stamp)
    context.log.info(
        f"Run {context.dagster_run.run_id} was cancelled: "
        + _some_of(
            taken, len(marks.pairs), "free to be imported again at the next tick", "freed by the run itself or loaded"
        )
    )
