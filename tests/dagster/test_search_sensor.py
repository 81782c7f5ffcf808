"""The search sensor's rhythm on a real Dagster instance and a real store (both backends)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import dagster as dg

from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import search_sensor

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 10),), ("cafe",))
SWISS = Targeting((CountryLocation("CH"),), ("cafe",))


def search_tick(instance, resources, cursor: dict | None = None):
    context = dg.build_sensor_context(
        instance=instance, resources=resources, cursor=json.dumps(cursor) if cursor is not None else None
    )
    return search_sensor(context)


def test_first_tick_searches_every_active_campaign_and_registers_it(instance, resources):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    swiss = store.add_campaign("Swiss", SWISS)
    paused = store.add_campaign("Paused", LEEDS)
    store.set_campaign_status(paused, "paused")

    result = search_tick(instance, resources)

    assert sorted(r.partition_key for r in result.run_requests) == sorted([str(leeds), str(swiss)])
    [added] = result.dynamic_partitions_requests
    assert sorted(added.partition_keys) == sorted([str(leeds), str(swiss)])
    assert set(json.loads(result.cursor)) == {str(leeds), str(swiss)}


def test_search_comes_back_every_two_minutes_while_imports_are_on_their_way(instance, resources):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    import_sensor(dg.build_sensor_context(instance=instance, resources=resources))  # marks: imports on their way
    now = datetime.now(UTC)
    started = (now - timedelta(hours=1)).isoformat()

    soon = search_tick(instance, resources, {str(leeds): {"window_start": started, "last": now.isoformat()}})
    later = search_tick(
        instance, resources, {str(leeds): {"window_start": started, "last": (now - timedelta(minutes=3)).isoformat()}}
    )

    assert soon.run_requests == []
    assert [r.partition_key for r in later.run_requests] == [str(leeds)]
    assert "still on their way" in later.run_requests[0].tags["nakodo/why"]


def test_search_stops_waiting_after_six_hours(instance, resources):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    now = datetime.now(UTC)
    state = {"window_start": (now - timedelta(hours=7)).isoformat(), "last": (now - timedelta(minutes=5)).isoformat()}

    result = search_tick(instance, resources, {str(leeds): state})

    assert result.run_requests == []


def test_with_imports_off_nothing_is_pending(instance, resources_off):
    store = resources_off["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    now = datetime.now(UTC)
    state = {"window_start": (now - timedelta(hours=1)).isoformat(), "last": (now - timedelta(minutes=5)).isoformat()}

    result = search_tick(instance, resources_off, {str(leeds): state})

    assert result.run_requests == [], "nothing will ever come, so the search does not keep coming back"
