"""A crash between reserving pairs and Dagster accepting their runs: the marks go, within minutes at worst."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import dagster as dg
import pytest
from fault_helpers import marks, request_pairs, states, tick

from nakodo_dagster import tags
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.partitions import places_partition
from nakodo_dagster.placement import LAUNCH_GRACE_MINUTES, PointLocation, Targeting
from nakodo_dagster.sensors import import_sensor as import_sensor_module
from nakodo_dagster.sensors.import_sensor import request_import_runs

pytestmark = pytest.mark.faults

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe", "pub"))
LOG = logging.getLogger("faults")


def test_a_crash_while_building_the_requests_takes_the_marks_back(instance, resources, monkeypatch):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)

    def refuse(*args, **kwargs):
        raise RuntimeError("the sensor died before its runs were accepted")

    with monkeypatch.context() as patch:
        patch.setattr(import_sensor_module, "_run_request", refuse)
        with pytest.raises(RuntimeError, match="died before"):
            tick(instance, resources)
        assert marks(store, LEEDS) == [], "marks of runs nobody asked for are taken back"

    [request] = tick(instance, resources).run_requests
    assert [(a, c) for a, c, _ in marks(store, LEEDS)] == sorted(request_pairs(request))


def _later_tick(instance, resources, minutes: float) -> dg.SensorResult:
    """The import sensor's tick some minutes from now."""
    later = datetime.now(UTC) + timedelta(minutes=minutes)
    return request_import_runs(instance, resources["store"].store, resources["overture"], later, LOG)


def test_runs_the_daemon_never_launched_are_asked_for_again_within_minutes(instance, resources):
    store = resources["store"].store
    campaign = store.add_campaign("Leeds", LEEDS)
    # The tick returned its requests, and the daemon died before creating the runs.
    [lost] = tick(instance, resources).run_requests
    assert states(store, campaign)[0] > 0, "the campaign waits on an import nobody will run"

    assert not _later_tick(instance, resources, LAUNCH_GRACE_MINUTES / 2).run_requests, "the launch may be late"
    [again] = _later_tick(instance, resources, LAUNCH_GRACE_MINUTES + 1).run_requests

    assert request_pairs(again) == request_pairs(lost)
    assert again.tags[tags.STAMP] != lost.tags[tags.STAMP]
    assert {stamp.isoformat() for _, _, stamp in marks(store, LEEDS)} == {again.tags[tags.STAMP]}


@pytest.mark.parametrize("launched_by", ["the sensor", "an analyst"])
def test_marks_with_a_run_behind_them_are_left_alone(instance, resources, launched_by):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    [request] = tick(instance, resources).run_requests
    if launched_by == "the sensor":
        run_tags = request.tags
    else:
        # A partition materialised by hand marks its pair from inside its own run, which carries no stamp.
        store.take_back(request_pairs(request), datetime.fromisoformat(request.tags[tags.STAMP]))
        store.force_request(request_pairs(request), datetime.now(UTC))
        run_tags = {tags.PARTITION: str(places_partition(*request_pairs(request)[0]))}
    instance.create_run_for_job(import_places, run_config=request.run_config, tags=run_tags)
    before = marks(store, LEEDS)

    assert not _later_tick(instance, resources, LAUNCH_GRACE_MINUTES + 1).run_requests
    assert marks(store, LEEDS) == before
