"""The op jobs the sensors launch: each beside the op it runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import dagster as dg

from nakodo_dagster.overture.faults import PASSING_KINDS, ReadFailed
from nakodo_dagster.store import store_unreachable

# A sensor's run prints what it did and what went wrong (INFO and up), not its every event at DEBUG: each event is
# in the UI anyway, and `make run`'s terminal stays readable. The instance still records every event.
CONSOLE_LOGGER_CONFIG = {"console": {"config": {"log_level": "INFO"}}}

# A step that met a passing fault tries again this many times, this far apart: a PostgreSQL restarted by its service
# manager or failed over answers again within a minute, and an object store past a burst of throttling, reset
# connections or stalls that outlasted the read's own tries (seconds) answers again within minutes.
STEP_RETRIES = 6
STEP_RETRY_SECONDS = 10


def passing_fault(error: BaseException) -> str | None:
    """What ``error`` left out of reach, in words, when it is a fault another try a little later fixes: the store
    (a restart, a failover, a host lost), the release once the read's own tries are spent on the object store's
    transient faults, or a file of it that changed under the read and is unreadable since; None for any other
    error."""
    if store_unreachable(error):
        return "The store could not be reached"
    if isinstance(error, ReadFailed) and error.fault.kind in PASSING_KINDS:
        return "The Overture release could not be read"
    return None


def retries_left(context: dg.OpExecutionContext) -> bool:
    """Whether the step runs again if it meets a passing fault now."""
    return context.retry_number < STEP_RETRIES


@contextlib.contextmanager
def passing_faults_retried(context: dg.OpExecutionContext) -> Iterator[None]:
    """Run a step's work; if it met a passing fault (``passing_fault``), run the step again in the same run a
    little later.

    A passing fault is not a failure of the run: an import's pairs stay marked with its stamp and its retry imports
    under them, instead of reading as failed for 7 days; a search's campaigns are not left waiting half an hour for
    their next request. After the last try the step fails with what happened, in one line.
    """
    try:
        yield
    except Exception as error:
        what = passing_fault(error)
        if what is None:
            raise
        why = (str(error).strip().splitlines() or [type(error).__name__])[0]
        if retries_left(context):
            context.log.warning(f"{what} ({why}); trying again in {STEP_RETRY_SECONDS} s.")
            raise dg.RetryRequested(max_retries=STEP_RETRIES, seconds_to_wait=STEP_RETRY_SECONDS) from error
        raise dg.Failure(
            description=f"{what} in {STEP_RETRIES + 1} tries {STEP_RETRY_SECONDS} s apart: {why}",
            allow_retries=False,
        ) from error
