"""One import run end to end: read the run's box from a release (the read tries a transient fault again itself),
replace exactly its reserved pairs, and, if it fails, mark them failed or take them back; a re-import by hand's
several runs one after the other."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg
import duckdb

from nakodo_dagster import tags
from nakodo_dagster.drift import DriftLimits
from nakodo_dagster.imports.failure import (
    Overrun,
    end_interrupted,
    failure_headline,
    import_failure,
    several_failed,
)
from nakodo_dagster.imports.interrupts import interrupts_delivered
from nakodo_dagster.imports.outcome import ImportOutcome, PairReport, pair_reports
from nakodo_dagster.overture.changelog import RunChanges
from nakodo_dagster.overture.faults import PASSING_KINDS, ReadFailed, classify
from nakodo_dagster.placement import ImportRun, narrowed, run_block
from nakodo_dagster.resources.overture import OvertureResource
from nakodo_dagster.settings import drift_limits
from nakodo_dagster.store import Store, store_unreachable
from nakodo_dagster.store.models import WrittenImport


def execute_import(
    run: ImportRun,
    store: Store,
    overture: OvertureResource,
    release: str,
    stamp: datetime | None,
    gate: DriftLimits | None = None,
    accept: bool = False,
    read_began: datetime | None = None,
) -> ImportOutcome:
    """Move to the release, without reading it, the pairs its changelog vouches for (``carry_over_unchanged``);
    read the rest of the run's box (no store lock held meanwhile), then write those pairs in one short transaction,
    dated when it commits; ``stamp`` is the run's own marks' (None: it holds none). The read tries a transient fault
    again itself (``OvertureResource.read``, a file written since ``read_began`` as changed under it); ReadFailed
    says what failed for good. With ``gate``, pairs whose newer release moved past its limits are held
    (``Store.write_import``), unless ``accept``: then they are measured and land (and nothing is carried over: an
    analyst's re-import reads)."""
    started = time.perf_counter()
    changes, carried, to_read = (
        (None, WrittenImport({}, {}), run) if accept else carry_over_unchanged(run, store, overture, release, stamp)
    )
    read, written = None, WrittenImport({}, {})
    if to_read is not None:
        read = overture.read(to_read, release, read_began)
        written = store.write_import(to_read, release, read.table, stamp=stamp, gate=gate, accept=accept)
    seconds = time.perf_counter() - started
    reports = pair_reports(to_read, read.table) if read is not None else []
    reports += [PairReport(area, category, rows, 0) for (area, category), rows in carried.rows.items()]
    return ImportOutcome(
        run,
        release,
        sorted(reports, key=lambda report: (report.area, report.category)),
        read,
        seconds,
        carried.replaced_marks | written.replaced_marks,
        written.compared,
        written.held,
        accept,
        changes,
        carried.rows,
    )


def carry_over_unchanged(
    run: ImportRun, store: Store, overture: OvertureResource, release: str, stamp: datetime | None
) -> tuple[RunChanges | None, WrittenImport, ImportRun | None]:
    """What the release's changelog lists in the run's cells, the pairs moved to the release without reading it
    (in cells where it lists nothing added or changed, read from the release it compares with and holding none of
    the places it lists as removed: ``Store.carry_over``), and the run narrowed to the pairs left to read (None:
    none are). The changelog is read only for a run with pairs read from the release it compares with."""
    nothing = WrittenImport({}, {})
    base = overture.release_before(release)
    if base is None or not store.read_from(run.pairs, base):
        return None, nothing, run
    changes = overture.changes(run, release, base)
    untouched = [] if changes is None else [pair for pair in run.pairs if not changes.moved[pair[0]]]
    if not untouched:
        return changes, nothing, run
    removed = [place for places in changes.removed.values() for place in places]
    carried = store.carry_over(untouched, release, base, removed, stamp=stamp)
    return changes, carried, narrowed(run, [pair for pair in run.pairs if pair not in carried.rows])


def import_or_release_marks(
    run: ImportRun,
    store: Store,
    overture: OvertureResource,
    stamp: datetime | None,
    release: str | None = None,
    overrun: Overrun | None = None,
    read_retried: bool = False,
    accept: bool = False,
    read_began: datetime | None = None,
) -> ImportOutcome:
    """Import the run. If it fails, its own marks (``stamp``) read as failed at once, so no campaign waits six
    hours on it; if it is cancelled or interrupted, they are taken back, since it never tried to the end.

    ``stamp`` is None for a run launched without one (by hand from the launchpad): it holds no marks. Without
    ``release``, the release is looked up here, so that a root or release that cannot be read fails the pairs
    like any other failed read. ``overrun`` is when the run passes its maximum runtime and why that fails it: an
    interrupt from then on is run monitoring stopping a stuck run, and its marks read as failed, since asking for
    the pairs again at once would hold an import slot as long again. ``read_retried`` says the step runs again
    after a transient fault of the release that outlasted the read's own tries (the object store throttling,
    resetting connections or stalling for a minute), or after a file written since ``read_began`` (when the run
    started) and unreadable since: the marks then stay for that try and ReadFailed is raised. A file unreadable
    before then fails the pairs at once, in every try. ``accept`` lands every pair's rows whatever the drift gate
    says (an analyst's accepted re-import), measured.
    """
    gate = drift_limits()
    try:
        with interrupts_delivered():
            release = release or overture.current_release()
            return execute_import(run, store, overture, release, stamp, gate, accept, read_began)
    except (dg.DagsterExecutionInterruptedError, KeyboardInterrupt):
        end_interrupted(run, store, stamp, overrun)
        raise
    except Exception as exc:
        interrupt = _interrupt_behind(exc)
        if interrupt is not None:
            end_interrupted(run, store, stamp, overrun)
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


def run_stamp(run: dg.DagsterRun) -> datetime | None:
    """The stamp of the marks a run holds (its STAMP tag), or None if it holds none."""
    value = tags.run_tag(run.tags, tags.STAMP)
    return tags.stamp_from_tag(value) if value else None


@dataclass
class ImportsInTurn:
    """A re-import by hand's runs, one after the other under one stamp: a failed one does not keep the others from
    landing, a cancel frees the pairs of those not begun, and the run fails at the end (``raise_failures``)."""

    runs: list[ImportRun]
    failures: list[dg.Failure] = field(default_factory=list)

    def outcomes(
        self,
        store: Store,
        overture: OvertureResource,
        stamp: datetime,
        release: str,
        accept: bool,
        log: dg.DagsterLogManager,
    ) -> Iterator[tuple[int, ImportRun, ImportOutcome]]:
        """Each run's number, the run and its outcome, as it lands; a failed run is logged and kept for the end."""
        for number, run in enumerate(self.runs, 1):
            try:
                outcome = import_or_release_marks(run, store, overture, stamp, release, accept=accept)
            except (dg.DagsterExecutionInterruptedError, KeyboardInterrupt):
                # Cancelled: the imports not begun are free at once, as this one's are.
                store.take_back([pair for later in self.runs[number:] for pair in later.pairs], stamp)
                raise
            except dg.Failure as failure:
                # One unreadable block does not keep the others from landing; the run fails at the end, with the
                # first failure (a run of one import fails with it and needs no line of its own).
                if len(self.runs) > 1:
                    log.error(f"Import {number} of {len(self.runs)} ({run_block(run)}) failed: {failure.description}")
                self.failures.append(failure)
                continue
            yield number, run, outcome

    def raise_failures(self) -> None:
        """Fail the run if any of its imports failed: with the one failure, or with the first counting the others."""
        if self.failures:
            raise self.failures[0] if len(self.failures) == 1 else several_failed(self.failures, len(self.runs))
