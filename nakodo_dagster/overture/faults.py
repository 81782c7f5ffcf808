"""What went wrong in a read of a release, in words: a transient fault is worth another try within the run, a
permanent one (a file that is not Parquet or cut short, a schema the reader does not know) is not. A file written
while the import read it and unreadable since is neither: a later try may find it whole again (``ReleaseChanged``)."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa

from nakodo_dagster.words import plural

T = TypeVar("T")

READ_ATTEMPTS = 4
"""Tries of one read before its pairs are marked failed: the seeds mark a pair failed only for a reason the task's
own retries could not fix."""
FIRST_BACKOFF_SECONDS = 1.0
PASSING_KINDS = ("transient", "changed")
"""The faults the import step tries again, a little later, before its pairs are marked failed: the object store's
(throttled, reset, stalled past the read's own tries) and a file written while the import read it and unreadable
since (being replaced in place, then whole again). A file unreadable when the import began is not tried again:
nothing says it will ever be whole."""

_TRANSIENT_WORDS = (
    "timed out",
    "timeout",
    "connection reset",
    "connection refused",
    "connection aborted",
    "broken pipe",
    "slowdown",
    "slow down",
    "throttl",
    "too many requests",
    "service unavailable",
    "internal server error",
    "bad gateway",
    "gateway timeout",
    # DuckDB's httpfs reads through curl, which names a connection reset or closed mid-answer by what it missed.
    "failure when receiving data from the peer",
    "failure when sending data to the peer",
    "empty reply from server",
    "connection closed",
)
_SERVER_STATUS = re.compile(r"\b(429|5\d\d)\b")
_PARQUET_FILE = re.compile(r"([\w.=-]+\.parquet)\b")
_UNREADABLE_WORDS = ("thrift", "parquet magic", "not a parquet file", "footer", "corrupt", "invalid parquet")


class ReleaseChanged(Exception):
    """A file of the release was written while the import read it (its version is not the one its index holds, and
    it is newer than the import) and could not be read again since: cut short, or replaced and not whole yet. A file
    already unreadable when the import began is not this, whatever an older index says of it: nothing says it will
    ever be whole."""


@dataclass(frozen=True)
class ReadFault:
    """A read that failed: its kind in words (``unreadable``, ``changed``, ``schema``, ``transient``, ``other``),
    the file it names if any, and how many tries it took."""

    kind: str
    file: str | None
    attempts: int
    error: BaseException

    @property
    def what(self) -> str:
        """What failed, in plain words, for a failure's first line."""
        file = f"file {self.file}" if self.file else "a file"
        if self.kind == "unreadable":
            return f"{file} is unreadable (truncated or not Parquet)"
        if self.kind == "changed":
            return f"{file} changed while it was read and is unreadable since (truncated or being replaced)"
        if self.kind == "schema":
            return f"{file} has columns the reader does not know ({first_line(self.error)})"
        if self.kind == "transient":
            tries = plural(self.attempts, "try", "tries")
            return f"{file} could not be fetched after {tries} ({first_line(self.error)})"
        return f"reading {file} failed: {first_line(self.error)}"


def classify(error: BaseException, attempts: int = 1) -> ReadFault:
    """The fault an exception of a read stands for (its whole chain of causes is read)."""
    chain = list(_chain(error))
    text = " ".join(f"{type(e).__name__} {e}" for e in chain).lower()
    file = next((m.group(1) for e in chain if (m := _PARQUET_FILE.search(str(e)))), None)
    if any(isinstance(e, ReleaseChanged) for e in chain):
        kind = "changed"
    elif any(word in text for word in _UNREADABLE_WORDS) or any(isinstance(e, pa.ArrowInvalid) for e in chain):
        kind = "unreadable"
    elif any(isinstance(e, (KeyError, pa.ArrowTypeError)) for e in chain) or "schema" in text:
        kind = "schema"
    elif (
        any(isinstance(e, (TimeoutError, ConnectionError)) for e in chain)
        or any(word in text for word in _TRANSIENT_WORDS)
        or _SERVER_STATUS.search(text)
    ):
        kind = "transient"
    else:
        kind = "other"
    return ReadFault(kind, file, attempts, error)


class ReadFailed(Exception):
    """A read of a release that failed for good: transient faults were tried ``READ_ATTEMPTS`` times."""

    def __init__(self, fault: ReadFault) -> None:
        super().__init__(fault.what)
        self.fault = fault


def read_with_retries(
    read: Callable[[], T],
    attempts: int = READ_ATTEMPTS,
    first_backoff: float = FIRST_BACKOFF_SECONDS,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``read()``, tried again with a doubling pause on a transient fault; raises ReadFailed at once on any other
    fault, or once the tries are used up."""
    for attempt in range(1, attempts + 1):
        try:
            return read()
        except Exception as exc:
            fault = classify(exc, attempt)
            if fault.kind != "transient" or attempt == attempts:
                raise ReadFailed(fault) from exc
            sleep(first_backoff * 2 ** (attempt - 1))
    raise AssertionError("unreachable: the last attempt returns or raises")


def _chain(error: BaseException):
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def first_line(error: BaseException) -> str:
    """An error's first line, at most 200 characters; its class's name if it says nothing."""
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else type(error).__name__
