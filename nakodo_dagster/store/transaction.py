"""The one way the store's SQL reaches a database: a short transaction, its placeholders, and the parameters
every statement on pairs takes.

Every statement is written once, with ``$name`` parameters, in SQL both databases accept; a backend only
supplies a short transaction (``Store._transact``), the placeholder style and a bulk load of Arrow rows.
"""

from __future__ import annotations

import contextlib
import functools
import re
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import pyarrow as pa

T = TypeVar("T")


@functools.cache
def _parameter_names(statement: str) -> frozenset[str]:
    return frozenset(re.findall(r"\$([A-Za-z_]\w*)", statement))


class Transaction(ABC):
    """One open transaction: the only way the store's SQL reaches a database."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def _translate(self, statement: str) -> str:
        """The statement in the driver's placeholder style; ``$name`` is DuckDB's own."""
        return statement

    def run(self, statement: str, **params: Any) -> None:
        """Execute one statement with those of ``params`` it names (DuckDB refuses any other)."""
        named = _parameter_names(statement)
        self._cursor.execute(
            self._translate(statement), {name: value for name, value in params.items() if name in named}
        )

    def rows(self, statement: str, **params: Any) -> list[tuple]:
        """Execute one statement and return its rows."""
        self.run(statement, **params)
        return self._cursor.fetchall()

    @abstractmethod
    def written(self, statement: str, **params: Any) -> int:
        """Execute one INSERT, UPDATE or DELETE and return how many rows it wrote."""

    @abstractmethod
    def load_incoming_places(self, places: pa.Table) -> None:
        """Bulk-load normalised rows (``imports.INCOMING_COLUMNS``, in order) into the temp table incoming_places."""

    @contextlib.contextmanager
    def written_order(self) -> Iterator[None]:
        """The statements run meanwhile join their tables in the order they are written: for statements driven by
        a temp table of what changed (analyzed), whose other tables' statistics may be missing or stale, so that a
        wrong guess of those tables' rows cannot make one of them the driver of a loop."""
        yield

    @abstractmethod
    def analyze(self, *tables: str) -> None:
        """Give the planner the sizes of these tables (the store's names, never user text): temp tables, which drive
        the statements after them, or the store's own after a bulk write."""

    @abstractmethod
    def keep_coverage_statistics(self, restated: int) -> None:
        """After a count restated ``restated`` pairs of coverage_pairs: bring the planner's statistics of the table
        up to date if they no longer describe it."""


def pair_params(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """The parameters of ``shared.PAIRS``: the pairs' areas and categories, each pair once."""
    # Unique, as DuckDB refuses to update one row twice in a statement. Not sorted: the order rows are locked in
    # is the statement's (the reservation sorts in SQL), and sorting a big tick's pairs in Python took a second.
    unique = list(dict.fromkeys(pairs))
    return {"areas": [a for a, _ in unique], "categories": [c for _, c in unique]}


def by_area(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """The pairs' categories by area, both sorted."""
    grouped: dict[str, list[str]] = {}
    for area, category in pairs:
        grouped.setdefault(area, []).append(category)
    return {area: sorted(grouped[area]) for area in sorted(grouped)}
