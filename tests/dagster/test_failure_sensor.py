"""A run killed before it could say so: the failure sensor makes its marks read as failed."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster.assets.campaign_search import campaign_progress
from nakodo_dagster.assets.places import import_places
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.sensors.failure_sensor import import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 10),), ("cafe",))


def test_a_killed_import_run_stops_the_wait(instance, resources):
    store = resources["store"].store
    campaign = store.campaign(store.add_campaign("Leeds", LEEDS))
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    request = ticked.run_requests[0]
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    # What run monitoring records when a run worker was killed with SIGKILL.
    instance.report_run_failed(run)
    failure = next(
        record.event_log_entry.dagster_event
        for record in instance.get_records_for_run(run.run_id).records
        if record.event_log_entry.dagster_event
        and record.event_log_entry.dagster_event.event_type_value == "PIPELINE_FAILURE"
    )
    assert campaign_progress(store, campaign, None, datetime.now(UTC)).pending > 0

    context = dg.build_run_status_sensor_context(
        sensor_name="import_failure_sensor",
        dagster_event=failure,
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run.run_id),
        resources=resources,
    ).for_run_failure()
    import_failure_sensor(context)

    progress = campaign_progress(store, campaign, None, datetime.now(UTC))
    assert progress.pending == 0
    assert set(progress.states.values()) == {"failed"}
