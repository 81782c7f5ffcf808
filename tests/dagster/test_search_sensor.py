"""The search sensor's rhythm and its batch runs, on a real Dagster instance and a real store (both backends)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import dagster as dg
import pyarrow as pa

from nakodo_dagster import tags
from nakodo_dagster.headless import register_partitions
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job, search_run_config, searched_campaign_ids
from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.partitions import campaign_id_of
from nakodo_dagster.placement import CountryLocation, ImportRun, PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.search import CAMPAIGN_SEARCH
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import SEARCH_IN_FLIGHT, search_sensor

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 10),), ("cafe",))
SWISS = Targeting((CountryLocation("CH"),), ("cafe",))
RELEASE = "2026-11-18.0"
NO_PLACES = pa.Table.from_pylist([], schema=PLACES_SCHEMA)


def search_tick(instance, resources) -> dg.SensorResult | dg.SkipReason:
    return search_sensor(dg.build_sensor_context(instance=instance, resources=resources))


def batched(result) -> list[int]:
    """The campaigns the tick's one run searches."""
    [request] = result.run_requests
    return searched_campaign_ids(request.run_config)


def searched(store, campaign_id: int, *, window_started: datetime, last: datetime) -> None:
    """The campaign's state as the sensor and a search would leave it: a window begun, a search at ``last``."""
    store.request_searches([campaign_id], [campaign_id], window_started)
    store.add_campaign_businesses(campaign_id, last)


def test_one_run_searches_every_due_campaign_and_registers_them(instance, resources):
    store = resources["store"].store
    campaigns = [store.add_campaign(f"Leeds {i}", LEEDS) for i in range(25)]
    swiss = store.add_campaign("Swiss", SWISS)
    paused = store.add_campaign("Paused", LEEDS)
    store.set_campaign_status(paused, "paused")

    result = search_tick(instance, resources)

    assert len(result.run_requests) == 1, "one run however many campaigns are due"
    assert batched(result) == [*campaigns, swiss]
    assert result.run_requests[0].tags["nakodo/why"] == "26 campaigns: first search of the day (26)"
    # The run list names the campaigns, as many as a tag shows whole.
    names = result.run_requests[0].tags["nakodo/campaign"]
    assert names.startswith("Leeds 0, Leeds 1, ") and names.endswith(" more") and len(names) <= 200
    # Each campaign's partition is found by its name.
    [added] = result.dynamic_partitions_requests
    assert list(added.partition_keys) == [f"{c}-leeds-{i}" for i, c in enumerate(campaigns)] + [f"{swiss}-swiss"]


def test_a_requested_search_is_not_asked_for_again_until_it_ran_or_was_lost(instance, resources):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    first = search_tick(instance, resources)
    assert batched(first) == [leeds]

    assert search_tick(instance, resources).run_requests == [], "its run has not begun yet"

    lost = datetime.now(UTC) - SEARCH_IN_FLIGHT - timedelta(seconds=1)
    store.request_searches([leeds], [leeds], lost)
    assert batched(search_tick(instance, resources)) == [leeds], "a run that never came is asked for again"


def test_search_comes_back_every_two_minutes_while_imports_are_on_their_way(instance, resources):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    import_sensor(dg.build_sensor_context(instance=instance, resources=resources))  # marks: imports on their way
    now = datetime.now(UTC)

    searched(store, leeds, window_started=now - timedelta(hours=1), last=now - timedelta(minutes=1))
    soon = search_tick(instance, resources)
    searched(store, leeds, window_started=now - timedelta(hours=1), last=now - timedelta(minutes=3))
    later = search_tick(instance, resources)

    assert soon.run_requests == []
    assert batched(later) == [leeds]
    assert later.run_requests[0].tags["nakodo/why"] == "1 campaign: imports on their way (1)"


def test_search_stops_waiting_after_six_hours(instance, resources):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    now = datetime.now(UTC)
    searched(store, leeds, window_started=now - timedelta(hours=7), last=now - timedelta(minutes=5))

    assert search_tick(instance, resources).run_requests == []


def leeds_cafes_landed(store, landed_at: datetime) -> tuple[int, ImportRun]:
    """The Leeds campaign, and the import of its areas' cafes landed at ``landed_at`` (no places: a result too)."""
    leeds = store.add_campaign("Leeds", LEEDS)
    areas = areas_for(LEEDS)
    [run] = import_runs({area: ["cafe"] for area in areas}, areas)
    store.write_import(run, RELEASE, NO_PLACES, landed_at)
    return leeds, run


def test_places_landing_after_a_search_bring_it_back(instance, resources):
    store = resources["store"].store
    now = datetime.now(UTC)
    leeds, run = leeds_cafes_landed(store, now - timedelta(hours=1))
    searched(store, leeds, window_started=now - timedelta(hours=1), last=now - timedelta(minutes=10))
    assert search_tick(instance, resources).run_requests == [], "nothing pending, nothing new"

    # Stamped a little before the last search began, committed after it looked: that search may have missed it.
    store.add_campaign_businesses(leeds, now)
    store.write_import(run, RELEASE, NO_PLACES, now - timedelta(seconds=20))

    result = search_tick(instance, resources)
    assert batched(result) == [leeds]
    assert result.run_requests[0].tags["nakodo/why"] == "1 campaign: new places landed since the last search (1)"


def test_with_imports_off_nothing_is_pending(instance, resources_off):
    store = resources_off["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    now = datetime.now(UTC)
    searched(store, leeds, window_started=now - timedelta(hours=1), last=now - timedelta(minutes=5))

    assert search_tick(instance, resources_off).run_requests == [], "nothing will ever come: no coming back"


def test_the_batch_run_materialises_each_campaign_partition(instance, resources):
    store = resources["store"].store
    leeds, swiss = store.add_campaign("Leeds", LEEDS), store.add_campaign("Swiss", SWISS)
    tick = search_tick(instance, resources)
    register_partitions(instance, tick)
    [request] = tick.run_requests
    assert request.tags["nakodo/campaign"] == "Leeds, Swiss"

    run = search_campaigns_job.execute_in_process(run_config=request.run_config, instance=instance, resources=resources)
    again = search_campaigns_job.execute_in_process(
        run_config=request.run_config, instance=instance, resources=resources
    )

    first = {m.partition: m.metadata for m in run.asset_materializations_for_node("search_due_campaigns")}
    leeds_key, swiss_key = f"{leeds}-leeds", f"{swiss}-swiss"
    assert set(first) == {leeds_key, swiss_key}
    assert {m.asset_key for m in run.asset_materializations_for_node("search_due_campaigns")} == {CAMPAIGN_SEARCH}
    assert first[leeds_key]["campaign"].value == "Leeds"
    assert first[leeds_key]["why"].value == "first search of the day"
    assert first[leeds_key]["pending_areas"].value == len(areas_for(LEEDS)), "nothing imported yet"
    assert first[leeds_key]["map"].value.startswith("![campaign map](data:image/png;base64,")
    second = {m.partition: m.metadata for m in again.asset_materializations_for_node("search_due_campaigns")}
    assert second[leeds_key]["map"].value.startswith("/assets/campaign_search?"), "the same picture is not drawn twice"
    assert instance.get_materialized_partitions(CAMPAIGN_SEARCH) == {leeds_key, swiss_key}
    assert search_tick(instance, resources).run_requests == [], "searched, and nothing new since"


def test_each_search_shows_its_account_its_plan_and_why_it_is_paused(instance, resources, solo_plan):
    store = resources["store"].store
    mine = store.add_campaign("Leeds", LEEDS)
    acme = store.add_account("Acme", "starter")
    kept = store.add_campaign("Acme Leeds", LEEDS, account_id=acme)
    paused = store.add_campaign("Acme Swiss", SWISS, account_id=acme)
    reasons = store.set_account_plan(acme, solo_plan)

    # An analyst may still search the paused campaign by hand: its materialisation says why it is paused.
    run = search_campaigns_job.execute_in_process(
        run_config=search_run_config([mine, kept, paused]), instance=instance, resources=resources
    )

    # A batch launched by hand, with no tags, names its campaigns too.
    assert instance.get_run_by_id(run.run_id).tags["nakodo/campaign"] == "Leeds, Acme Leeds, Acme Swiss"
    shown = {
        campaign_id_of(m.partition): {key: m.metadata[key].value for key in ("account", "plan", "status")}
        for m in run.asset_materializations_for_node("search_due_campaigns")
    }
    assert shown == {
        mine: {"account": "default (id 1)", "plan": "unlimited", "status": "active"},
        kept: {"account": f"Acme (id {acme})", "plan": "solo", "status": "active"},
        paused: {"account": f"Acme (id {acme})", "plan": "solo", "status": f"paused: {reasons[paused]}"},
    }


def test_places_a_search_already_read_do_not_bring_it_back(instance, resources):
    store = resources["store"].store
    now = datetime.now(UTC)
    leeds, run = leeds_cafes_landed(store, now - timedelta(seconds=20))
    # Searched 20 seconds after the landing, and it read those places: nothing new for it to find.
    searched(store, leeds, window_started=now - timedelta(hours=1), last=now)

    assert search_tick(instance, resources).run_requests == [], "no search that can only find nothing"

    store.write_import(run, RELEASE, NO_PLACES, now - timedelta(seconds=10))
    result = search_tick(instance, resources)
    assert batched(result) == [leeds], "places landed after what the search read: searched again"
    assert result.run_requests[0].tags["nakodo/why"] == "1 campaign: new places landed since the last search (1)"


def leeds_import_failed(instance, resources, reason: str, now: datetime) -> tuple[int, list[tuple[str, str]]]:
    """The Leeds campaign, whose first import the import sensor asked for and which failed at ``now``; its pairs."""
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    [request] = import_sensor(dg.build_sensor_context(instance=instance, resources=resources)).run_requests
    pairs = [tuple(pair) for pair in import_payload(request.run_config)["pairs"]]
    assert store.mark_failed(pairs, tags.stamp_from_tag(request.tags[tags.STAMP]), now, reason) == len(pairs)
    return leeds, pairs


def test_a_campaign_is_searched_again_when_its_failed_areas_land_after_a_retry(instance, resources):
    store = resources["store"].store
    now = datetime.now(UTC)
    leeds, pairs = leeds_import_failed(instance, resources, "file part-00003.parquet is unreadable", now)
    searched(store, leeds, window_started=now - timedelta(hours=1), last=now)
    assert search_tick(instance, resources).run_requests == [], "a failed area is not waited on"
    [progress] = store.search_progress(datetime.now(UTC))
    assert (progress.failed, progress.coming, progress.missing) == (len(areas_for(LEEDS)), 0, 0)

    # The analyst retries one pair now; its import lands.
    area, category = pairs[0]
    assert store.forget_failed_import(area, category, datetime.now(UTC)) is not None
    [retried] = import_runs({area: [category]}, areas_for(LEEDS))
    store.write_import(retried, RELEASE, NO_PLACES)

    result = search_tick(instance, resources)
    assert batched(result) == [leeds]
    assert result.run_requests[0].tags["nakodo/why"] == "1 campaign: new places landed since the last search (1)"


def test_a_search_counts_failed_areas_as_failed_and_says_why(instance, resources):
    reason = "Overture release 2026-11-18.0: file part-00003.parquet is unreadable (truncated or not Parquet)"
    leeds, pairs = leeds_import_failed(instance, resources, reason, datetime.now(UTC))
    tick = search_tick(instance, resources)
    register_partitions(instance, tick)

    run = search_campaigns_job.execute_in_process(
        run_config=tick.run_requests[0].run_config, instance=instance, resources=resources
    )

    [materialisation] = run.asset_materializations_for_node("search_due_campaigns")
    assert campaign_id_of(materialisation.partition) == leeds
    metadata = {key: value.value for key, value in materialisation.metadata.items()}
    failed = {area for area, _ in pairs}
    assert (metadata["areas_failed"], metadata["pending_areas"]) == (len(failed), 0), "failed, not on their way"
    assert metadata["failed_areas"] == dict.fromkeys(sorted(failed), reason)


def test_campaigns_registered_by_their_bare_id_are_registered_again_by_name(instance, resources):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    # Before partition keys carried names, the campaign's partition was its id alone.
    instance.add_dynamic_partitions("campaign", [str(leeds)])

    register_partitions(instance, search_tick(instance, resources))

    assert instance.get_dynamic_partitions("campaign") == [f"{leeds}-leeds"], "the bare id is retired"
    assert search_tick(instance, resources).dynamic_partitions_requests == [], "nothing more to change"
