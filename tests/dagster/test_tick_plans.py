"""Every statement the sensors' ticks run, planned on a PostgreSQL store whose tables were never analyzed (a new
store before autovacuum's first pass, or a server where it is off): no plan may loop over rows the planner guessed
wrong. Each statement is explained (not run twice) just before the tick runs it, and its plan's shape is checked."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import dagster as dg
import psycopg2
import pytest
import time_machine

from bench.soak import fleet
from nakodo_dagster.assets.coverage import places_coverage_sensor
from nakodo_dagster.placement import LAUNCH_GRACE_MINUTES
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import search_sensor
from nakodo_dagster.store import NewCampaign, Transaction, open_store

pytestmark = pytest.mark.postgres

CAMPAIGNS = 3_000
SENSORS = (import_sensor, search_sensor, places_coverage_sensor)
# Statements EXPLAIN takes, beside CREATE TEMP TABLE ... AS.
_EXPLAINABLE = {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}
# Nodes that hand on their one child's rows: a LATERAL subquery behind its fence (OFFSET 0), a cache of them.
_WRAPPERS = {"Materialize", "Memoize", "Subquery Scan", "Limit"}
# What a plan may loop over: an index looked up by the outer row's key, or a relation of a row or two.
_LOOKUPS = {"Index Scan", "Index Only Scan", "Bitmap Heap Scan", "Result", "Function Scan"}


@contextmanager
def explained(plans: list[tuple[str, dict]]) -> Iterator[None]:
    """Every statement the store runs meanwhile, explained just before it runs: (statement, plan)."""
    run = Transaction.run

    def explain(tx: Transaction, statement: str, **params: Any) -> None:
        words = statement.split()
        if (words[0] in _EXPLAINABLE or words[:3] == ["CREATE", "TEMP", "TABLE"]) and "pg_" not in statement:
            named = {name: value for name, value in params.items() if f"${name}" in statement}
            tx._cursor.execute(f"EXPLAIN (FORMAT JSON) {tx._translate(statement)}", named)
            plans.append((" ".join(words), tx._cursor.fetchone()[0][0]["Plan"]))
        run(tx, statement, **params)

    Transaction.run = explain
    try:
        yield
    finally:
        Transaction.run = run


def _nodes(plan: dict) -> Iterator[dict]:
    yield plan
    for child in plan.get("Plans", []):
        yield from _nodes(child)


def _loops_over_a_scan(plan: dict) -> list[str]:
    """The nested loops whose inner side reads a whole relation again for every outer row (no key looked up)."""
    found = []
    for node in _nodes(plan):
        if node["Node Type"] != "Nested Loop":
            continue
        outer, inner = node["Plans"]
        if outer["Plan Rows"] <= 1:
            # A temp table of what changed is analyzed: one row is what it holds, not a guess.
            continue
        while inner["Node Type"] in _WRAPPERS and len(read := _read(inner)) == 1:
            inner = read[0]
        if inner["Node Type"] not in _LOOKUPS:
            found.append(f"{inner['Node Type']} {inner.get('Relation Name', '')}".strip())
    return found


def _read(plan: dict) -> list[dict]:
    """The children whose rows a node reads, in order: not the subqueries of its filters (NOT IN's)."""
    return [child for child in plan.get("Plans", []) if child["Parent Relationship"] not in {"SubPlan", "InitPlan"}]


def _driver(plan: dict) -> str:
    """The relation a plan reads first: its leftmost scan (a subquery of a filter, as NOT IN's, is not read first)."""
    while read := _read(plan):
        plan = read[0]
    return plan.get("Relation Name", plan["Node Type"])


# The statements driven by a temp table of what changed, and that table: they join in their written order.
DRIVEN = {
    "CREATE TEMP TABLE areas_moved": "moving_pairs",
    "INSERT INTO line_demand": "relined_blocks",
    "INSERT INTO place_imports (area, category, release, rows, imported_at) SELECT needed_pairs": "admitted_blocks",
}


@pytest.fixture
def cold_store(postgres_url: str) -> str:
    """CAMPAIGNS campaigns added in one go to a new store that nothing ever analyzed, on a server that does not
    count writes (track_counts off), so that the ticks' own analyze (``Store.keep_statistics``) cannot see them
    either: the plans must hold without it."""
    with psycopg2.connect(postgres_url) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT current_database()")
        [(database,)] = cursor.fetchall()
        cursor.execute(f'ALTER DATABASE "{database}" SET track_counts = off')  # the fixture's own database
    connection.close()
    store = open_store(postgres_url)
    store.migrate()
    account = store.add_account("agency", "unlimited")
    store.add_campaigns([NewCampaign(f"campaign {i}", account, t) for i, t in enumerate(fleet(CAMPAIGNS, 0))])
    return postgres_url


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_no_tick_statement_loops_over_a_guess(cold_store: str, release_root: str):
    resources = {"store": StoreResource(database=cold_store), "overture": OvertureResource(root=release_root)}
    plans: list[tuple[str, dict]] = []
    cursors: dict[str, str | None] = {}
    with dg.instance_for_test() as instance, time_machine.travel(datetime.now(UTC) + timedelta(minutes=2)) as clock:
        for round_ in range(3):
            for sensor in SENSORS:
                with (
                    dg.build_sensor_context(
                        instance=instance, resources=resources, cursor=cursors.get(sensor.name)
                    ) as context,
                    explained(plans),
                ):
                    data = sensor.evaluate_tick(context)
                cursors[sensor.name] = data.cursor
            clock.shift(timedelta(minutes=LAUNCH_GRACE_MINUTES + 1 if round_ == 0 else 1))

    with psycopg2.connect(cold_store) as connection, connection.cursor() as cursor:
        cursor.execute("SELECT reltuples FROM pg_class WHERE relname = 'campaigns'")
        assert cursor.fetchall() == [(-1,)], "the ticks planned over a table analyzed meanwhile"
    connection.close()
    loops = {statement[:90]: _loops_over_a_scan(plan) for statement, plan in plans if _loops_over_a_scan(plan)}
    assert loops == {}
    drivers = {start: {_driver(plan) for statement, plan in plans if statement.startswith(start)} for start in DRIVEN}
    assert drivers == {start: {table} for start, table in DRIVEN.items()}
