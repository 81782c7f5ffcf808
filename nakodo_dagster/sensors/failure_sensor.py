"""Marks a crashed import's pairs as failed, for crashes the import itself could not catch (a killed process)."""

from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster.assets.places import import_places
from nakodo_dagster.placement import ImportRun
from nakodo_dagster.resources import StoreResource


@dg.run_failure_sensor(
    monitored_jobs=[import_places],
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="A failed import's marks read as failed at once: campaigns stop waiting and the 7-day block starts.",
)
def import_failure_sensor(context: dg.RunFailureSensorContext, store: StoreResource) -> None:
    config = context.dagster_run.run_config["ops"]["import_block"]["config"]
    run = ImportRun.from_payload(config)
    marked = store.store.mark_failed(run.pairs, datetime.now(UTC))
    context.log.info(f"Run {context.dagster_run.run_id} failed: {marked} of {len(run.pairs)} marks now read as failed.")
