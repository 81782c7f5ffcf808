"""What the Dagster-level tests share: the import sensor's look and its runs, executed in process."""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path

import dagster as dg

from nakodo_dagster.headless import register_partitions
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.import_sensor import request_import_runs


def import_as_the_sensor_asks(
    instance: dg.DagsterInstance, store: StoreResource, root: Path, release: str, now: datetime
) -> list[dg.ExecuteInProcessResult]:
    """One import sensor look at ``now``, reading ``release``, and every run it asks for, executed."""
    overture = OvertureResource(root=str(root), release=release)
    result = request_import_runs(instance, store.store, overture, now, logging.getLogger("test"))
    register_partitions(instance, result)
    return [
        import_places.execute_in_process(
            run_config=request.run_config,
            tags=request.tags,
            instance=instance,
            resources={"store": store, "overture": overture},
        )
        for request in result.run_requests
    ]
