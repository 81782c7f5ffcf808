"""The import sensor on a real Dagster instance and a real store (both backends)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest

from nakodo_dagster import tags
from nakodo_dagster.headless import register_partitions
from nakodo_dagster.jobs.import_places import import_payload, import_places, import_run_config
from nakodo_dagster.placement import (
    LAUNCH_GRACE_MINUTES,
    REQUESTED,
    ImportRun,
    PointLocation,
    Targeting,
    areas_for,
    import_runs,
)
from nakodo_dagster.sensors import import_sensor as import_sensor_module
from nakodo_dagster.sensors.import_sensor import ImportCursor, import_sensor, request_import_runs
from nakodo_dagster.store import Reservation
from nakodo_dagster.words import plural

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))


def tick(instance: dg.DagsterInstance, resources: dict, cursor: str | None = None) -> dg.SensorResult:
    return import_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor))


def marks(resources: dict) -> set[tuple[str, str]]:
    store = resources["store"].store
    areas = areas_for(LEEDS)
    return {(r.area, r.category) for r in store.import_rows(areas, LEEDS.categories) if r.release == REQUESTED}


def test_no_active_campaign_means_no_run(instance, resources):
    result = tick(instance, resources)
    assert not result.run_requests
    assert "Nothing missing" in result.skip_reason.skip_message


def test_a_campaign_gets_one_run_per_block_and_its_partitions(instance, resources):
    resources["store"].store.add_campaign("Leeds", LEEDS)
    areas = areas_for(LEEDS)
    expected = import_runs({key: list(LEEDS.categories) for key in areas}, areas)

    result = tick(instance, resources)

    assert isinstance(result, dg.SensorResult)
    payloads = [import_payload(r.run_config) for r in result.run_requests]
    assert sorted(ImportRun.from_payload(p).key for p in payloads) == sorted(run.key for run in expected)
    assert all(
        r.tags[tags.IMPORT_KEY] == ImportRun.from_payload(import_payload(r.run_config)).key for r in result.run_requests
    )
    assert marks(resources) == {(a, c) for a in areas for c in LEEDS.categories}
    added = {request.partitions_def_name: set(request.partition_keys) for request in result.dynamic_partitions_requests}
    assert added == {"area": set(areas), "category": set(LEEDS.categories)}


def test_each_import_run_names_the_active_campaigns_it_serves(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    store.add_campaign("Leeds pubs", Targeting(LEEDS.locations, ("pub",)))
    store.add_campaign("Leeds bakeries", Targeting(LEEDS.locations, ("bakery",)))
    store.set_campaign_status(store.add_campaign("Leeds paused", LEEDS), "paused")
    store.add_campaign("Paris", Targeting((PointLocation(48.8566, 2.3522, 5),), ("cafe",)))

    result = tick(instance, resources)

    named = {}
    for request in result.run_requests:
        run = ImportRun.from_payload(import_payload(request.run_config))
        named[request.tags[tags.CAMPAIGN]] = named.get(request.tags[tags.CAMPAIGN], set()) | set(run.categories)
    # A campaign is named on the runs that read its categories; the paused one on none.
    assert named == {"Leeds, Leeds pubs, Leeds bakeries": {"bakery", "cafe", "pub"}, "Paris": {"cafe"}}


def test_the_next_tick_waits_instead_of_asking_again(instance, resources):
    resources["store"].store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    assert first.run_requests

    second = tick(instance, resources)

    assert not second.run_requests
    pairs = len(areas_for(LEEDS)) * len(LEEDS.categories)
    assert f"imports are on their way for {pairs} pairs" in second.skip_reason.skip_message


def test_imports_off_writes_no_mark_and_says_why(instance, resources_off):
    resources_off["store"].store.add_campaign("Leeds", LEEDS)

    result = tick(instance, resources_off)

    runs = len(import_runs({key: list(LEEDS.categories) for key in areas_for(LEEDS)}, areas_for(LEEDS)))
    assert not result.run_requests
    assert (
        f"{plural(runs, 'import run')} not asked for: NAKODO_OVERTURE_ROOT isn't set" in result.skip_reason.skip_message
    )
    assert marks(resources_off) == set()


def test_a_failure_after_reserving_takes_the_marks_back_and_fails_the_tick(instance, resources, monkeypatch):
    resources["store"].store.add_campaign("Leeds", LEEDS)

    def broken(*request):
        raise RuntimeError("the run request could not be built")

    monkeypatch.setattr(import_sensor_module, "_run_request", broken)
    with pytest.raises(RuntimeError, match="could not be built"):
        tick(instance, resources)
    assert marks(resources) == set()

    monkeypatch.undo()
    assert tick(instance, resources).run_requests, "the next tick asks again"


def test_identical_work_is_not_launched_twice_within_two_hours(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    request = first.run_requests[0]
    instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    # Someone cleared the marks (say, by hand): the same payload is reservable again.
    stamp = tags.stamp_from_tag(request.tags[tags.STAMP])
    every_pair = [tuple(p) for r in first.run_requests for p in import_payload(r.run_config)["pairs"]]
    store.take_back(every_pair, stamp)

    second = tick(instance, resources)

    keys = {r.tags[tags.IMPORT_KEY] for r in second.run_requests}
    assert request.tags[tags.IMPORT_KEY] not in keys
    assert len(second.run_requests) == len(first.run_requests) - 1
    skipped = {tuple(p) for p in import_payload(request.run_config)["pairs"]}
    assert not skipped & marks(resources), "the skipped run's marks are not kept"


def test_only_new_partitions_are_registered(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    register_partitions(instance, tick(instance, resources))
    store.add_campaign("Leeds bakeries", Targeting(LEEDS.locations, ("bakery",)))

    result = tick(instance, resources)

    added = {request.partitions_def_name: set(request.partition_keys) for request in result.dynamic_partitions_requests}
    assert added == {"category": {"bakery"}}
    assert {tuple(p)[1] for r in result.run_requests for p in import_payload(r.run_config)["pairs"]} == {"bakery"}


def test_a_root_without_releases_fails_the_tick_and_keeps_no_mark(instance, database_url, tmp_path):
    from nakodo_dagster.errors import InvalidInput
    from nakodo_dagster.resources import OvertureResource, StoreResource

    resources = {"store": StoreResource(database=database_url), "overture": OvertureResource(root=str(tmp_path))}
    resources["store"].store.add_campaign("Leeds", LEEDS)

    with pytest.raises(InvalidInput, match="no release"):
        tick(instance, resources)
    assert marks(resources) == set(), "a missing release must not block every pair for 7 days"


@pytest.mark.parametrize("status", [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED])
def test_a_failed_or_cancelled_run_does_not_block_its_retry(instance, resources, status):
    """The seed's Trigger.dev frees a failed run's idempotency key: an analyst's retry goes at once."""
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    request = first.run_requests[0]
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    instance.report_run_failed(run) if status == dg.DagsterRunStatus.FAILURE else instance.report_run_canceled(run)
    every_pair = [tuple(p) for r in first.run_requests for p in import_payload(r.run_config)["pairs"]]
    store.take_back(every_pair, tags.stamp_from_tag(request.tags[tags.STAMP]))

    second = tick(instance, resources)

    assert request.tags[tags.IMPORT_KEY] in {r.tags[tags.IMPORT_KEY] for r in second.run_requests}


def test_the_cursor_remembers_stamps_seen_with_a_run(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    for request in first.run_requests:
        instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    stamp = first.run_requests[0].tags[tags.STAMP]
    later = tags.stamp_from_tag(stamp) + timedelta(minutes=LAUNCH_GRACE_MINUTES + 1)

    result = request_import_runs(instance, store, resources["overture"], later, logging.getLogger("test"))

    assert ImportCursor.loads(result.cursor).confirmed == {stamp}
    assert marks(resources) == {(a, c) for a in areas_for(LEEDS) for c in LEEDS.categories}


def test_a_tick_after_a_look_with_nothing_changed_does_not_look_again(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    # Later than every change noted so far, and than the overlap a look allows for commits still landing.
    start = datetime.now(UTC) + timedelta(minutes=2)
    log = logging.getLogger("test")
    first = request_import_runs(instance, store, resources["overture"], start, log)
    assert first.run_requests

    second = request_import_runs(
        instance, store, resources["overture"], start + timedelta(minutes=1), log, cursor=first.cursor
    )

    assert "nothing changed since the last look" in second.skip_reason.skip_message


def test_campaigns_a_lowered_plan_paused_are_not_imported_for_and_the_tick_says_so(
    instance, resources, resources_off, capsys, solo_plan
):
    store = resources["store"].store
    acme = store.add_account("Acme", "starter")
    store.add_campaign("Leeds", Targeting((PointLocation(53.75, -1.75, 2),), ("cafe",)), account_id=acme)
    paris = store.add_campaign("Paris", Targeting((PointLocation(48.75, 2.25, 2),), ("cafe",)), account_id=acme)
    assert list(store.set_account_plan(acme, solo_plan)) == [paris]
    left_out = "1 campaign paused by its account's plan is left out (`nakodo campaign list` says why)."

    first = tick(instance, resources)

    assert {tuple(p) for r in first.run_requests for p in import_payload(r.run_config)["pairs"]} == {
        ("cell:53.5,-2", "cafe")
    }
    assert store.import_rows(["cell:48.5,2"], ["cafe"]) == [], "nothing asked for the paused campaign"
    # A tick that asks for runs says so in its log, the tick's own in the UI.
    assert f"Asked for 1 of 1 import run of release 2026-11-18.0. {left_out}" in capsys.readouterr().err
    # Looking again (no cursor): nothing missing, and still the campaign left out, imports on or off.
    assert f"imports are on their way for 1 pair. {left_out}" in tick(instance, resources).skip_reason.skip_message
    assert left_out in tick(instance, resources_off).skip_reason.skip_message


def test_marks_that_cannot_be_taken_back_are_marked_failed_with_why(instance, resources, monkeypatch):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)

    def broken(*request):
        raise RuntimeError("the run request could not be built")

    def refused(self, pairs, stamp):
        # As the store does, an empty take-back does not reach the database.
        if not pairs:
            return 0
        raise ConnectionError("server closed the connection unexpectedly")

    monkeypatch.setattr(import_sensor_module, "_run_request", broken)
    # On the class: the sensor's context builds its own store from the resource.
    monkeypatch.setattr(type(store), "take_back", refused)
    with pytest.raises(RuntimeError, match="could not be built"):
        tick(instance, resources)
    monkeypatch.undo()

    # The campaign learns it: its areas count as failed, with why, rather than as imports on their way.
    rows = store.import_rows(areas_for(LEEDS), LEEDS.categories)
    assert rows and {row.failure for row in rows} == {
        "the import sensor could not launch the import (the run request could not be built) nor take its mark back "
        "(server closed the connection unexpectedly)"
    }
    [progress] = store.search_progress(datetime.now(UTC), [leeds])
    assert (progress.coming, progress.failed) == (0, progress.areas - progress.missing)
    assert progress.failed > 0


def _counting_queries(instance: dg.DagsterInstance, monkeypatch) -> list[str]:
    """The run-storage queries made on ``instance`` from now on, by method."""
    made: list[str] = []
    for name in ("get_run_records", "get_runs", "get_runs_count", "get_run_ids"):
        original = getattr(instance, name)

        def counted(*args, _name=name, _original=original, **kwargs):
            made.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(instance, name, counted)
    return made


# Points whose 200 km circles reach blocks enough for a run each of several reservations.
_FAR_APART = tuple(PointLocation(lat, lng, 200) for lat, lng in ((53.8, -1.55), (48.85, 2.35), (40.4, -3.7)))


def _unlaunched(store, count: int) -> list[Reservation]:
    """``count`` reservations of one run each, a minute apart, whose runs never reach Dagster."""
    start = datetime.now(UTC) + timedelta(minutes=2)
    reservations = [store.reserve_missing(start + timedelta(minutes=minute), 1) for minute in range(count)]
    assert all(len(reservation.runs) == 1 for reservation in reservations)
    return reservations


def test_a_take_back_costs_a_few_instance_queries_however_many_stamps_and_pairs(instance, resources, monkeypatch):
    store = resources["store"].store
    store.add_campaign("North", Targeting(_FAR_APART, ("cafe", "pub", "bakery")))
    reservations = _unlaunched(store, 6)
    stamps = [reservation.stamp for reservation in reservations]
    # One stamp's run did reach Dagster: its marks stay.
    launched = store.marks_stamped(stamps[2])
    instance.create_run_for_job(
        import_places,
        run_config=import_run_config(reservations[2].runs[0]).to_config_dict(),
        tags={tags.STAMP: tags.stamp_tag(stamps[2])},
    )
    pairs = sum(len(store.marks_stamped(stamp)) for stamp in stamps)
    later = stamps[-1] + timedelta(minutes=LAUNCH_GRACE_MINUTES + 1)
    queries = _counting_queries(instance, monkeypatch)

    confirmed = import_sensor_module.take_back_unlaunched(instance, store, set(), later, logging.getLogger("test"))

    assert pairs > 100
    # The stamps' tag under its two keys, and the queued or running runs' partitions: not one per stamp or pair.
    assert len(queries) <= 3
    assert confirmed == {tags.stamp_tag(stamps[2])}
    assert list(store.marks_awaiting_run(later)) == [stamps[2]]
    assert sorted(store.marks_stamped(stamps[2])) == sorted(launched)


def test_a_tick_with_much_to_take_back_does_part_and_says_so(instance, resources, monkeypatch, caplog):
    store = resources["store"].store
    store.add_campaign("North", Targeting(_FAR_APART, ("cafe", "pub")))
    stamps = [reservation.stamp for reservation in _unlaunched(store, 4)]
    later = stamps[-1] + timedelta(minutes=LAUNCH_GRACE_MINUTES + 1)
    # No time at all: each tick takes back the oldest stamp's marks and leaves the rest.
    monkeypatch.setattr(import_sensor_module, "TAKE_BACK_SECONDS", 0.0)
    queries = _counting_queries(instance, monkeypatch)
    log = logging.getLogger("test")

    left, said = [], []
    for _ in stamps:
        queries.clear()
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            import_sensor_module.take_back_unlaunched(instance, store, set(), later, log)
        assert len(queries) <= 3
        left.append(list(store.marks_awaiting_run(later)))
        said.append(caplog.text)

    assert left == [stamps[1:], stamps[2:], stamps[3:], []]
    assert "The marks of 3 more ticks whose runs never reached Dagster are taken back at the next tick" in said[0]
    assert "more tick" not in said[-1]
