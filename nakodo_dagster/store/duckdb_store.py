"""The store in a DuckDB file: embedded, nothing to start, one process at a time."""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from nakodo_dagster.duckdb_connection import closing
from nakodo_dagster.store.base import Store, store_identity
from nakodo_dagster.store.transaction import T, Transaction

# Backoff between attempts on a locked file: short enough that a sensor tick barely notices a peer's
# transaction, capped so that sixty seconds of waiting is a few hundred opens, not thousands.
_FIRST_PAUSE_S = 0.005
_LONGEST_PAUSE_S = 0.25
# Nothing is downloaded at run time (as in overture/duck.py): the store's SQL needs only the extensions built into
# the duckdb wheel, and a statement needing another fails at once instead of reaching out for it.
_CONNECTION_CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


class StoreLocked(TimeoutError):
    """The DuckDB file stayed locked by another process (or busy in this one) for longer than the store waits."""


class _DuckDBTransaction(Transaction):
    def written(self, statement: str, **params: Any) -> int:
        # DuckDB answers a write with one row: the count.
        return self.rows(statement, **params)[0][0]

    def analyze(self, *tables: str) -> None:
        # DuckDB keeps a table's statistics up to date as it writes it: its row count, and the distinct-value
        # sketches its join order is chosen by, updated by every insert. Its ANALYZE recomputes those sketches and
        # changed the estimates of a join on 200,000 rows just inserted by 3 %.
        return

    def keep_coverage_statistics(self, restated: int) -> None:
        return

    def load_incoming_places(self, places: pa.Table) -> None:
        self._cursor.register("incoming_arrow", places)
        self._cursor.execute("INSERT INTO incoming_places SELECT * FROM incoming_arrow")


# One transaction at a time per file in this process too. Threads share DuckDB's instance of a file, where two
# transactions inserting the same key fail with a constraint error rather than wait: serialising them here
# makes a thread behave like another process, which waits on the file lock.
_THREAD_LOCKS: dict[Path, threading.Lock] = {}
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(path: Path) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(path, threading.Lock())


# The files this thread holds open (``DuckDBStore.held``), by resolved path: per thread, so that a tick's file is
# never lent to another thread's transaction, which waits its turn at ``_THREAD_LOCKS`` instead.
_HELD = threading.local()


def _held() -> dict[Path, duckdb.DuckDBPyConnection]:
    if not hasattr(_HELD, "files"):
        _HELD.files = {}
    return _HELD.files


class DuckDBStore(Store):
    """A DuckDB file opened for each call, or a block of them (``held``), and closed after it, so that the sensors,
    the runs and the UI share it. A user's own asset reads ``places`` from the same file through dagster-duckdb's
    ``DuckDBResource`` (docs/configuration.md); the store opens the file itself (``_connect`` says why), which also
    keeps Dagster out of a command that needs only the store.
    """

    def __init__(self, path: str | Path, *, lock_timeout: float = 60.0) -> None:
        self._database = str(path)
        self.lock_timeout = lock_timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._key = self.path.resolve()
        self._thread_lock = _thread_lock(self._key)

    @property
    def path(self) -> Path:
        return Path(self._database)

    def __repr__(self) -> str:
        return f"DuckDBStore({self._database!r})"

    @contextmanager
    def held(self) -> Iterator[None]:
        """The file opened once for the block and closed when it ends: each call in it, by this thread and any
        DuckDBStore of the same file, is still its own transaction, on a connection of its own (its temp tables
        gone with it), but none opens the file, reads its catalog and blocks afresh or checkpoints it on closing.
        Other processes wait for the whole block, as for one transaction; a sensor tick holds it (0.1 to 1 s),
        never a run."""
        if self._key in _held():
            yield
            return
        deadline = self._take_thread_lock()
        try:
            with closing(self._open_waiting(deadline)) as connection:
                _held()[self._key] = connection
                try:
                    yield
                finally:
                    del _held()[self._key]
        finally:
            self._thread_lock.release()

    @property
    def identity(self) -> str:
        return store_identity("duckdb", str(self.path.resolve()))

    def _transact(self, work: Callable[[Transaction], T]) -> T:
        held = _held().get(self._key)
        if held is not None:
            with closing(held.cursor()) as connection:
                return _in_transaction(connection, work)
        deadline = self._take_thread_lock()
        try:
            # Closing without a commit rolls back: a failure anywhere leaves the file as it was.
            with closing(self._open_waiting(deadline)) as connection:
                return _in_transaction(connection, work)
        finally:
            self._thread_lock.release()

    def _take_thread_lock(self) -> float:
        """This process's turn at the file (``_THREAD_LOCKS``); the deadline for the file lock after it."""
        deadline = time.monotonic() + self.lock_timeout
        if not self._thread_lock.acquire(timeout=self.lock_timeout):
            raise StoreLocked(f"the DuckDB store {self.path} stayed busy in this process for {self.lock_timeout:g} s")
        return deadline

    def _open_waiting(self, deadline: float) -> duckdb.DuckDBPyConnection:
        """The file opened, waiting while another process holds it, until ``deadline``."""
        pause = _FIRST_PAUSE_S
        while True:
            try:
                if not self.path.exists():
                    self._create_file()
                return self._connect(self.path)
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower():
                    raise
                if time.monotonic() + pause > deadline:
                    raise StoreLocked(
                        f"the DuckDB store {self.path} stayed locked for {self.lock_timeout:g} s: {exc}"
                    ) from exc
            time.sleep(pause * random.uniform(0.5, 1.0))
            pause = min(pause * 2, _LONGEST_PAUSE_S)

    def _connect(self, database: Path) -> duckdb.DuckDBPyConnection:
        """One attempt at opening ``database`` with the store's settings; a locked file raises at once.

        Not ``DuckDBResource.get_connection``: it retries a failed open ten times, pausing 0.1 s and doubling,
        about 100 s in all whatever ``lock_timeout`` says (a caller allowing 0.5 s would wait 100), and on any
        IO error, a damaged file as much as a lock. It also leaves the connection, its transaction and the file
        lock open when the block raises, until the exception is freed. ``_transact`` waits on the lock instead,
        up to ``lock_timeout``, and the ``with`` in ``_transact`` closes the file whatever happens.
        """
        return duckdb.connect(str(database), config=_CONNECTION_CONFIG)

    def _create_file(self) -> None:
        # DuckDB writes a new file's header only after creating it, and a process opening the file meanwhile is
        # told it "is not a valid DuckDB database file". So a new store is made aside and hard-linked into place,
        # which fails harmlessly when another process got there first.
        aside = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.new")
        try:
            self._connect(aside).close()
            os.link(aside, self.path)
        except FileExistsError:
            pass
        finally:
            aside.unlink(missing_ok=True)


def _in_transaction(connection: duckdb.DuckDBPyConnection, work: Callable[[Transaction], T]) -> T:
    connection.execute("SET TimeZone = 'UTC'")
    connection.begin()
    result = work(_DuckDBTransaction(connection))
    connection.commit()
    return result
