"""What a run's worker prints in the terminal: Dagster's console logging, each failure in one line.

Dagster's console logger prints a failure's error whole, its chain of causes with each one's traceback: about 150
lines in `make run`'s terminal for one unreadable release file, and a run's failure repeated its step's. A run's
worker (``launcher.execute_run``) makes its loggers of this class, Dagster's default console logger among them: a
failure is one line, what failed and what to do, in words. The run's event log keeps every event whole, traceback
and all, for the UI.
"""

from __future__ import annotations

import copy
import logging
from typing import TYPE_CHECKING

import dagster as dg
from dagster._core.log_manager import LOG_RECORD_METADATA_ATTR

if TYPE_CHECKING:
    from dagster._utils.error import SerializableErrorInfo

# Where the terminal's reader finds what a one-line failure leaves out.
_IN_THE_UI = "its traceback is in the run's event log"


class FailuresInOneLine(logging.Logger):
    """A logger that prints a Dagster event carrying an error in one line (``failure_line``), any other record as
    it is."""

    def handle(self, record: logging.LogRecord) -> None:
        line = failure_line(record)
        if line is not None:
            # A copy: whoever else handles the record gets it whole.
            record = copy.copy(record)
            record.msg, record.args = line, ()
        super().handle(record)


def failure_line(record: logging.LogRecord) -> str | None:
    """The one line a Dagster event carrying an error prints in the terminal, or None for any other record.

    Dagster appends the error whole to the event's message; the line keeps the message and says the error in
    words: a run's failure whose step failed points at the step's line instead of saying it again."""
    metadata = getattr(record, LOG_RECORD_METADATA_ATTR, None)
    event = metadata.get("dagster_event") if isinstance(metadata, dict) else None
    data = event.event_specific_data if event is not None else None
    error = getattr(data, "error", None)
    if error is None or not isinstance(record.msg, str):
        return None
    appended = f"\n\n{getattr(data, 'error_display_string', error.to_string())}"
    if not record.msg.endswith(appended):
        return None
    message = record.msg.removesuffix(appended)
    if event.event_type == dg.DagsterEventType.RUN_FAILURE and getattr(data, "first_step_failure_event", None):
        return f"{message} The step's failure is above."
    return f"{message.rstrip('.')}: {error_in_words(error)}"


def error_in_words(error: SerializableErrorInfo) -> str:
    """An error as one line: a ``dg.Failure``'s description, which says what failed and what to do, its lines
    joined; any other exception as Python names it, with where its traceback is. The error a step's code raised,
    not Dagster's wrapper around it."""
    while error.cls_name == dg.DagsterExecutionStepExecutionError.__name__ and error.cause is not None:
        error = error.cause
    text = error.message.strip()
    if error.cls_name == dg.Failure.__name__:
        lines = [line.strip() for line in text.partition(": ")[2].splitlines() if line.strip()]
        return " ".join(line if line.endswith((".", ":", ";", "!", "?")) else f"{line}." for line in lines)
    first = text.splitlines()[0] if text else error.cls_name
    return f"{first} ({_IN_THE_UI})"
