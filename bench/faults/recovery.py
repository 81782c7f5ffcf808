"""When the fleet came back from a fault: the pairs it hit landed, the import sensor ticked again, a pair read from a
new release landed."""

from __future__ import annotations

import dagster as dg

from bench.faults.checks import import_rows_of, needed_pairs
from bench.faults.inject import Fault
from bench.faults.runs import run_pairs
from nakodo_dagster import tags
from nakodo_dagster.dagster_internals import InstigatorType, TickStatus
from nakodo_dagster.placement import REQUESTED
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.store import Store


def _landed_at(store: Store, pairs: list[tuple[str, str]], since: float) -> float | None:
    """When the last of these pairs landed (seconds since the epoch; ``since`` if all had landed before it, as
    when a cancel reaches a run that has written its pairs, or if there are none: a fault whose pairs no active
    campaign needs any more, its campaigns paused by a smaller plan, had nothing to bring back), or None if one has
    not."""
    wanted = set(pairs)
    if not wanted:
        return since
    landed = [row.imported_at.timestamp() for row in import_rows_of(store, wanted) if row.release != REQUESTED]
    if len(landed) < len(wanted):
        return None
    return max([*landed, since])


def _first_tick_after(instance: dg.DagsterInstance, sensor: str, at: float) -> float | None:
    """When ``sensor`` first ticked without failing after ``at`` (seconds since the epoch), or None."""
    states = instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
    ticks = [
        tick.timestamp
        for state in states
        if state.name == sensor
        for tick in instance.get_ticks(
            state.instigator_origin_id, state.selector_id, after=at, statuses=[TickStatus.SUCCESS, TickStatus.SKIPPED]
        )
    ]
    return min(ticks, default=None)


def _hit_pairs(fault: Fault, instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """The pairs ``fault`` hit: its run's, or those of the imports in flight when it began and, for one that lasts
    (the store stopped, a burst), of those started while it lasted."""
    if fault.seconds is None:
        return fault.pairs
    end = fault.at + fault.seconds
    started = [
        pair
        for record in instance.get_run_records(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}))
        if record.start_time and fault.at <= record.start_time <= end
        for pair in run_pairs(record.dagster_run)
    ]
    return fault.pairs + started


def recovery_time(fault: Fault, instance: dg.DagsterInstance, store: Store) -> float | None:
    """When the fleet came back from ``fault`` (seconds since the epoch), or None if it has not: the pairs it hit
    landed (``_hit_pairs``; the daemon's: those of the imports in flight, else the first import after the
    restart); a paused campaign, once resumed."""
    if fault.kind in ("campaign_paused", "plan_downgraded"):
        return fault.recovered_at
    if fault.kind == "release_added":
        if (first := _first_landed_from(store, fault.release)) is not None:
            return first
        # No import started after it (nothing was left to read): nothing had to move to it.
        records = instance.get_run_records(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}))
        return None if any(r.start_time and r.start_time > fault.at for r in records) else fault.at
    if fault.kind == "code_server_killed":
        # The daemon's sensors run in its code server: back once the import sensor ticks again, and what was in
        # flight (its workers are the fork server's, not the code server's) has landed.
        ticked = _first_tick_after(instance, import_sensor.name, fault.at)
        landed = _landed_at(store, _needed_of(fault, store), fault.at)
        return None if ticked is None or landed is None else max(ticked, landed)
    if pairs := _hit_pairs(fault, instance):
        return _landed_at(store, [pair for pair in pairs if pair in needed_pairs(store)], fault.at)
    if fault.seconds is not None:
        # No import ran while it lasted: nothing had to come back but the store or the object store itself.
        return fault.at + fault.seconds
    ends = [
        record.end_time
        for record in instance.get_run_records(
            dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}, statuses=[dg.DagsterRunStatus.SUCCESS])
        )
        if record.start_time and record.start_time > fault.at
    ]
    return min(ends) if ends else None


def _needed_of(fault: Fault, store: Store) -> list[tuple[str, str]]:
    """The pairs ``fault`` hit that an active campaign still needs."""
    needed = needed_pairs(store)
    return [pair for pair in fault.pairs if pair in needed]


def _first_landed_from(store: Store, release: str | None) -> float | None:
    """When the first pair read from ``release`` landed (seconds since the epoch), or None if none has."""
    [(first,)] = store._transact(
        lambda tx: tx.rows("SELECT min(imported_at) FROM place_imports WHERE release = $release", release=release)
    )
    return first.timestamp() if first else None
