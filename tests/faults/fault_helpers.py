"""What the fault tests do again and again: tick the import sensor, execute a run, and read what the user sees."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster.headless import register_partitions
from nakodo_dagster.jobs.import_places import import_payload, import_places
from nakodo_dagster.placement import REQUESTED, Targeting, areas_for
from nakodo_dagster.search import campaign_progress
from nakodo_dagster.sensors.failure_sensor import import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.store import Store

Pair = tuple[str, str]


def tick(instance: dg.DagsterInstance, resources: dict) -> dg.SensorResult:
    """One evaluation of the import sensor, its new partitions registered as the daemon would."""
    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        result = import_sensor(context)
    register_partitions(instance, result)
    return result


def execute(instance: dg.DagsterInstance, resources: dict, request: dg.RunRequest) -> dg.ExecuteInProcessResult:
    """The import run a request asks for, executed in this process; a failure is returned, not raised."""
    return import_places.execute_in_process(
        run_config=request.run_config, tags=request.tags, instance=instance, resources=resources, raise_on_error=False
    )


def request_pairs(request: dg.RunRequest) -> list[Pair]:
    """The (area, category) pairs a run request reserved."""
    return [tuple(pair) for pair in import_payload(request.run_config)["pairs"]]


def failure_text(result: dg.ExecuteInProcessResult) -> str:
    """Every error message of the run's events (failed steps, resources, the run), causes included, as the UI
    shows them."""
    messages = []
    for event in result.all_events:
        error = getattr(event.event_specific_data, "error", None)
        while error is not None:
            messages.append(error.message)
            error = error.cause
    return "\n".join(messages)


def assert_run_failed(instance: dg.DagsterInstance, result: dg.ExecuteInProcessResult) -> None:
    """Dagster records the run as failed, as the UI lists it."""
    assert not result.success
    assert instance.get_run_by_id(result.run_id).status == dg.DagsterRunStatus.FAILURE


def stored_places(store: Store, pairs: list[Pair]) -> dict[Pair, set[tuple[str, str]]]:
    """(place id, release) of every place the store holds for each pair."""
    wanted = set(pairs)
    rows = store._transact(lambda tx: tx.rows("SELECT area, category, id, release FROM places"))
    held: dict[Pair, set[tuple[str, str]]] = {pair: set() for pair in wanted}
    for area, category, place_id, release in rows:
        if (area, category) in wanted:
            held[(area, category)].add((place_id, release))
    return held


def changed_places(before: dict[Pair, set], after: dict[Pair, set]) -> list[str]:
    """A line per pair whose places differ between two ``stored_places``; none when nothing changed.

    Asserted empty rather than comparing the snapshots: a diff of thousands of places is unreadable, and
    pytest's rendering of it once overflowed the stack.
    """
    return [
        f"{pair}: {len(before.get(pair, set()) - after.get(pair, set()))} places gone, "
        f"{len(after.get(pair, set()) - before.get(pair, set()))} new"
        for pair in sorted(set(before) | set(after))
        if before.get(pair) != after.get(pair)
    ]


def marks(store: Store, targeting: Targeting) -> list[tuple[str, str, datetime]]:
    """The campaign's pairs marked as requested, with the stamp each mark carries."""
    rows = store.import_rows(areas_for(targeting), targeting.categories)
    return sorted((r.area, r.category, r.imported_at) for r in rows if r.release == REQUESTED)


def states(store: Store, campaign_id: int) -> tuple[int, set[str]]:
    """What the campaign's user sees: areas still pending, and the states of its pairs."""
    progress = campaign_progress(store, store.campaign(campaign_id), None, datetime.now(UTC))
    return progress.pending, set(progress.states.values())


def run_failure_sensor(instance: dg.DagsterInstance, run_id: str, resources: dict) -> None:
    """The failure sensor's evaluation for a run Dagster recorded as failed."""
    failure = next(
        record.event_log_entry.dagster_event
        for record in instance.get_records_for_run(run_id).records
        if record.event_log_entry.dagster_event
        and record.event_log_entry.dagster_event.event_type_value == "PIPELINE_FAILURE"
    )
    context = dg.build_run_status_sensor_context(
        sensor_name="import_failure_sensor",
        dagster_event=failure,
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run_id),
        resources=resources,
    ).for_run_failure()
    import_failure_sensor(context)


def wait_until(condition: Callable[[], object], what: str, seconds: float = 60) -> None:
    """Poll ``condition`` until it holds; fail naming ``what`` never happened."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out: {what}"
        time.sleep(0.02)


def backends_waiting(watcher, statement: str) -> list[int]:
    """The PostgreSQL backends waiting on a lock while running ``statement`` (a fragment of their SQL)."""
    with watcher.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s", (f"%{statement}%",)
        )
        return [row[0] for row in cursor.fetchall()]
