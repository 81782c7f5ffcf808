"""A cancel that reaches an import while Python cannot raise it is delivered again, rather than lost."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

# Long enough for the collector's pass, or the finalizer, that swallowed the cancel to return first.
REDELIVER_AFTER_SECONDS = 0.05


@contextmanager
def interrupts_delivered() -> Iterator[None]:
    """Within it, an interrupt that Python could not raise is sent again, until it is raised.

    Dagster cancels a step by raising DagsterExecutionInterruptedError from its SIGINT handler, in whatever the main
    thread runs at that moment. In a callback of the garbage collector or a finalizer (SQLAlchemy's weakref callbacks,
    seen in a cancelled import), Python cannot raise it: it prints "Exception ignored in ..." and the step goes on
    as if never cancelled, holding its pool slot to the end. Sent again from another thread, the signal is handled
    once that callback has returned."""
    previous = sys.unraisablehook

    def deliver_again(unraisable: sys.UnraisableHookArgs) -> None:
        if isinstance(unraisable.exc_value, (dg.DagsterExecutionInterruptedError, KeyboardInterrupt)):
            threading.Timer(REDELIVER_AFTER_SECONDS, os.kill, (os.getpid(), signal.SIGINT)).start()
        else:
            previous(unraisable)

    sys.unraisablehook = deliver_again
    try:
        yield
    finally:
        sys.unraisablehook = previous
