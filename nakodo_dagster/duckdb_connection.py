"""How this project holds a DuckDB connection: closed by the code that opened it, its query interrupted first when
the block is left by an exception."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import duckdb

T = TypeVar("T")


@contextmanager
def closing(connection: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """``connection`` for the block, closed when it ends; a block ended by an exception interrupts the connection's
    query first.

    An interrupt (a cancelled run's SIGTERM, Ctrl-C) is raised on the main thread, while DuckDB's own threads may
    still be scanning for the query; closing or collecting the connection waits for them, and a test's scan of a
    trillion rows left that way kept its process busy until it was killed. ``interrupt()`` stops them where they are.
    """
    try:
        yield connection
    except BaseException:
        connection.interrupt()
        raise
    finally:
        connection.close()


@contextmanager
def in_memory() -> Iterator[duckdb.DuckDBPyConnection]:
    """A new in-memory database for the block (``closing``), which never downloads an extension: this machine's are
    loaded from their packages."""
    with closing(
        duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    ) as connection:
        yield connection


def interruptible(connection: duckdb.DuckDBPyConnection, work: Callable[[], T]) -> T:
    """``work``, a query on ``connection`` and the fetch of its result, on a thread of its own while this thread
    waits where Python hears an interrupt at once; an interrupt then interrupts the query, and waits for it to stop.

    DuckDB hears a signal only between tasks of its own, and a task reading a release over HTTP lasts seconds: a
    cancelled import's query, left to notice, read on for 5 to 7 s and 16 to 24 more requests.
    """
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duckdb-query")
    try:
        return pool.submit(work).result()
    except BaseException:
        connection.interrupt()
        raise
    finally:
        pool.shutdown(wait=True)
