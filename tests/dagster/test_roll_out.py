"""A newer release on a real instance and a real store (both backends): the import sensor announces it once, and a
roll-out's pairs are what it asks for next, through its queue, accounts taking turns; the UI's roll_out_release job
does what the command does."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
from overture_helpers import CURRENT, PREVIOUS

from nakodo_dagster import tags
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.jobs.import_places import import_payload, import_places
from nakodo_dagster.jobs.roll_out import roll_out_pairs, roll_out_release
from nakodo_dagster.placement import FRESH_DAYS, PointLocation, Targeting, areas_for
from nakodo_dagster.resources import OvertureResource
from nakodo_dagster.sensors.import_sensor import RELEASE_LOOK_MINUTES, import_sensor, request_import_runs
from nakodo_dagster.store import Store

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))
# One account's five 200 km circles along the equator: 24 blocks, more than a short queue admits at once.
BIG = Targeting(tuple(PointLocation(0.1, -170.0 + 7 * i, 200) for i in range(5)), ("cafe",))
SMALL = Targeting((PointLocation(53.75, -1.75, 2),), ("pub",))
LOADED_AT = datetime.now(UTC) - timedelta(days=3)


def load_previous(store: Store, *targetings: Targeting) -> set[tuple[str, str]]:
    """Every pair of the targetings loaded from the previous release three days ago (no places): fresh."""
    pairs = sorted({(area, c) for t in targetings for area in areas_for(t) for c in t.categories})
    store._transact(
        lambda tx: tx.run(
            "INSERT INTO place_imports (area, category, release, places_release, rows, imported_at) "
            "SELECT unnest($areas::TEXT[]), unnest($categories::TEXT[]), $release, $release, 0, $at",
            areas=[a for a, _ in pairs],
            categories=[c for _, c in pairs],
            release=PREVIOUS,
            at=LOADED_AT,
        )
    )
    return set(pairs)


def tick(instance: dg.DagsterInstance, resources: dict, cursor: str | None = None) -> dg.SensorResult:
    return import_sensor(dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor))


def requested_pairs(result: dg.SensorResult) -> set[tuple[str, str]]:
    payloads = [import_payload(request.run_config) for request in result.run_requests or []]
    return {tuple(pair) for payload in payloads for pair in payload["pairs"]}


def test_a_newer_release_is_announced_once_and_a_roll_out_is_asked_for_next(instance, resources, caplog):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    pairs = load_previous(store, LEEDS)

    first = tick(instance, resources)

    assert not first.run_requests, "every pair is fresh"
    (observation,) = first.asset_events
    assert isinstance(observation, dg.AssetObservation) and observation.asset_key == PLACES
    metadata = {name: value.value for name, value in observation.metadata.items()}
    assert metadata["release"] == CURRENT
    assert (metadata["pairs_on_release"], metadata["pairs"], metadata["pairs_asked_to_move"]) == (0, len(pairs), 0)
    assert metadata["last_pair_moves_at"] == pytest.approx((LOADED_AT + timedelta(days=FRESH_DAYS)).timestamp())
    assert f"nakodo imports roll-out {CURRENT}" in observation.description

    # Not on the next tick, nor when the root is looked at again and holds the same release.
    second = tick(instance, resources, first.cursor)
    assert not second.asset_events and not second.run_requests
    later = datetime.now(UTC) + timedelta(minutes=RELEASE_LOOK_MINUTES + 1)
    with caplog.at_level(logging.INFO):
        third = request_import_runs(
            instance, store, resources["overture"], later, logging.getLogger("test"), cursor=second.cursor
        )
    assert not third.asset_events and "newer release" not in caplog.text

    store.roll_out(CURRENT, category="pub")
    rolled = tick(instance, resources, second.cursor)

    assert requested_pairs(rolled) == {(area, "pub") for area in areas_for(LEEDS)}
    assert not rolled.asset_events


def test_blocks_imported_from_the_older_release_minutes_ago_move_when_rolled_out(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    first = tick(instance, resources)
    # The runs of these very payloads moved the pairs to the older release minutes ago.
    for request in first.run_requests:
        done = {**request.tags, tags.RELEASE: PREVIOUS}
        instance.create_run_for_job(
            import_places, run_config=request.run_config, tags=done, status=dg.DagsterRunStatus.SUCCESS
        )
    store.take_back(list(requested_pairs(first)), tags.stamp_from_tag(first.run_requests[0].tags[tags.STAMP]))
    pairs = load_previous(store, LEEDS)
    store.roll_out(CURRENT)

    rolled = tick(instance, resources, first.cursor)

    # Other work than a run of the same payload to the same release: asked for, and no loaded pair taken back.
    assert requested_pairs(rolled) == pairs
    assert {r.tags[tags.RELEASE] for r in rolled.run_requests} == {CURRENT}
    assert {(row.area, row.category) for row in store.import_rows({a for a, _ in pairs}, LEEDS.categories)} == pairs


def test_a_fresh_store_or_one_on_the_release_announces_nothing(instance, resources):
    assert not tick(instance, resources).asset_events
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    load_previous(store, LEEDS)
    store._transact(lambda tx: tx.run("UPDATE place_imports SET release = $r, places_release = $r", r=CURRENT))
    assert not tick(instance, resources).asset_events


def test_a_roll_out_goes_through_the_queue_accounts_taking_turns(instance, resources):
    store = resources["store"].store
    big = store.add_account("big", "unlimited")
    small = store.add_account("small", "unlimited")
    store.add_campaign("Equator", BIG, account_id=big)
    store.add_campaign("Leeds pubs", SMALL, account_id=small)
    rolled = load_previous(store, BIG, SMALL)
    # A short queue: fewer runs are admitted at once than the big account's blocks.
    short = {**resources, "overture": OvertureResource(root=resources["overture"].root, queue_minutes=1)}
    first = tick(instance, short)
    assert store.roll_out(CURRENT) == len(rolled)

    result = tick(instance, short, first.cursor)

    asked = requested_pairs(result)
    assert asked <= rolled and 0 < len(result.run_requests) < 24
    assert {(area, "pub") for area in areas_for(SMALL)} <= asked, "the small account does not wait behind the big"


def test_the_roll_out_job_moves_pairs_as_the_command_does(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    load_previous(store, LEEDS)

    done = roll_out_release.execute_in_process(
        run_config={"ops": {roll_out_pairs.name: {"config": {"category": "cafe"}}}},
        instance=instance,
        resources=resources,
    )

    assert done.success
    (observation,) = done.asset_observations_for_node(roll_out_pairs.name)
    assert observation.asset_key == PLACES
    assert observation.metadata["pairs_asked_to_move"].value == len(areas_for(LEEDS))
    assert requested_pairs(tick(instance, resources)) == {(area, "cafe") for area in areas_for(LEEDS)}


def test_the_roll_out_job_refuses_bad_config_and_writes_nothing(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    load_previous(store, LEEDS)

    done = roll_out_release.execute_in_process(
        run_config={"ops": {roll_out_pairs.name: {"config": {"category": "pub", "all": True}}}},
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )

    assert not done.success
    (failure,) = [event for event in done.all_events if event.is_step_failure]
    assert "exactly one of a campaign, a category or all" in failure.step_failure_data.error.to_string()
    assert store.roll_out_status(CURRENT, datetime.now(UTC)).asked == 0
