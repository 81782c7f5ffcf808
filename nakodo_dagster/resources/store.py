"""The database that holds place_imports, places, campaigns and campaign_businesses."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cached_property

import dagster as dg
from pydantic import Field

from nakodo_dagster.store import Store, open_store


class StoreResource(dg.ConfigurableResource):
    """The project's store: a DuckDB file (embedded, nothing to start) or a ``postgresql://`` URL.

    Configured from ``NAKODO_DATABASE``. A DuckDB file is opened only for short transactions, or a sensor's tick
    (``held``), so the sensors, two import runs and a search can share it.
    """

    database: str = Field(description="A DuckDB file path or a postgresql:// URL (NAKODO_DATABASE).")

    @cached_property
    def store(self) -> Store:
        """The store, its schema brought up to date on first use."""
        store = open_store(self.database)
        store.migrate()
        return store

    @contextmanager
    def held(self) -> Iterator[Store]:
        """The store for one sensor tick: a DuckDB file opened once for the tick's calls, its schema checked in the
        same visit, and let go when the tick ends (``Store.held``); the planner's statistics of tables written to
        since they were last analyzed are brought up to date first (``Store.keep_statistics``)."""
        with open_store(self.database).held():
            self.store.keep_statistics()
            yield self.store
