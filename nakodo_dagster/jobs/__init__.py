"""The op jobs the sensors launch: each beside the op it runs."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import dagster as dg

from nakodo_dagster.store import store_unreachable

# A sensor's run prints what it did and what went wrong (INFO and up), not its every event at DEBUG: each event is
# in the UI anyway, and `make run`'s terminal stays readable. The instance still records every event.
CONSOLE_LOGGER_CONFIG = {"console": {"config": {"log_level": "INFO"}}}

# A step that met its store out of reach tries again this many times, this far apart: a PostgreSQL restarted by its
# service manager or failed over answers again within a minute.
STORE_RETRIES = 6
STORE_RETRY_SECONDS = 10


@contextlib.contextmanager
def store_outage_retried(context: dg.OpExecutionContext) -> Iterator[None]:
    """Run a step's work; if it met the store out of reach, run the step again in the same run a little later.

    A store outage is a fault another try fixes, not a failure of the run: an import's pairs stay marked with its
    stamp (nothing could mark them failed anyway) and its retry imports under them; a search's campaigns are not
    left waiting half an hour for their next request. After the last try the step fails with what happened, in
    one line.
    """
    try:
        yield
    except Exception as error:
        if not store_unreachable(error):
            raise
        what = (str(error).strip().splitlines() or [type(error).__name__])[0]
        if context.retry_number < STORE_RETRIES:
            context.log.warning(f"The store could not be reached ({what}); trying again in {STORE_RETRY_SECONDS} s.")
            raise dg.RetryRequested(max_retries=STORE_RETRIES, seconds_to_wait=STORE_RETRY_SECONDS) from error
        raise dg.Failure(
            description=f"The store could not be reached in {STORE_RETRIES + 1} tries "
            f"{STORE_RETRY_SECONDS} s apart: {what}",
            allow_retries=False,
        ) from error
