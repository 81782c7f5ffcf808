"""The failure half of an import run: when it overran, what becomes of an interrupted run's marks, and the
``dg.Failure`` a failed run ends with, in words an analyst acts on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import NamedTuple

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.overture.check import check_command
from nakodo_dagster.overture.faults import ReadFault
from nakodo_dagster.placement import RETRY_DAYS, ImportRun
from nakodo_dagster.store import Store
from nakodo_dagster.words import plural


class Overrun(NamedTuple):
    """When a run passes its maximum runtime, and why its pairs then fail."""

    at: datetime
    reason: str


def run_started(context: dg.OpExecutionContext) -> datetime | None:
    """When the op's run started, as Dagster recorded it; None before it did."""
    record = context.instance.get_run_record_by_id(context.run_id)
    if record is None or record.start_time is None:
        return None
    return datetime.fromtimestamp(record.start_time, UTC)


def run_overrun(context: dg.OpExecutionContext) -> Overrun | None:
    """When the op's run passes its maximum runtime (its MAX_RUNTIME tag, from when it started) and the reason its
    pairs then fail for; None for a run without one, or with one Dagster's run monitoring cannot read either."""
    try:
        seconds = float(context.run.tags[tags.MAX_RUNTIME])
    except (KeyError, ValueError):
        return None
    started = run_started(context)
    if started is None:
        return None
    return Overrun(
        started + timedelta(seconds=seconds),
        f"the import did not finish within {seconds / 60:g} minutes of starting and was stopped as stuck",
    )


def end_interrupted(run: ImportRun, store: Store, stamp: datetime | None, overrun: Overrun | None) -> None:
    """An interrupted import's marks: failed past its maximum runtime (run monitoring stopped it), else taken back."""
    if stamp is not None:
        now = datetime.now(UTC)
        if overrun is not None and now >= overrun.at:
            store.mark_failed(run.pairs, stamp, now, overrun.reason)
        else:
            store.take_back(run.pairs, stamp)


# Faults of a file itself: another try reads the same bytes until the file is replaced.
FILE_FAULTS = ("unreadable", "changed")


def import_failure(run: ImportRun, release: str | None, fault: ReadFault) -> dg.Failure:
    """The step's failure: its first line says what failed, naming the release and the file; then what to do first
    (a broken file: replace it and check the release before retrying, since a retry alone reads it again); then what
    happens meanwhile; the failed pairs and the file as metadata."""
    pairs = sorted(run.pairs)
    first = pairs[0]
    where = f"Overture release {release}" if release else "The Overture release could not be found"
    retry = f"`nakodo imports retry {first[0]} {first[1]}`" + (
        f" (and the same for the {plural(len(pairs) - 1, 'other pair')})" if len(pairs) > 1 else ""
    )
    if fault.kind in FILE_FAULTS and release:
        file = f"file {fault.file}" if fault.file else "the broken file"
        advice = (
            f"Replace {file} with a whole copy, check the release with `{check_command(release)}` (it names every "
            f"unreadable file), then retry: {retry}."
        )
    else:
        advice = f"To retry now: {retry}."
    description = (
        f"{where}: {fault.what}\n{advice}\n"
        f"{plural(len(pairs), 'pair')} of this import {'is' if len(pairs) == 1 else 'are'} marked failed; no campaign "
        f"waits for them, and the import sensor asks for them again on its own after {RETRY_DAYS} days."
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


def several_failed(failures: list[dg.Failure], imports: int) -> dg.Failure:
    """The run's failure when more than one of its imports failed: the first one's, counting the others."""
    first = failures[0]
    return dg.Failure(
        description=f"{len(failures)} of {plural(imports, 'import')} of this run failed; the first:\n"
        f"{first.description}\nThe others' errors are in the run's log.",
        metadata=first.metadata,
        allow_retries=False,
    )
