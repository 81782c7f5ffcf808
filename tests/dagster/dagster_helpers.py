"""What the Dagster-level tests share: the import sensor's look and its runs, executed in process; one look of a
Dagster daemon."""

from __future__ import annotations

import logging
import warnings
from datetime import datetime
from pathlib import Path

import dagster as dg

from nakodo_dagster.dagster_internals import EventLogConsumerDaemon, MonitoringDaemon, WorkspaceProcessContext
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


def look_as_the_daemon_does(
    daemon: MonitoringDaemon | EventLogConsumerDaemon, process: WorkspaceProcessContext
) -> None:
    """One iteration of a Dagster daemon (run monitoring, the retry daemon) in this process, as its loop runs one."""
    for _ in daemon.run_iteration(process):
        pass


def started_retry_daemon(process: WorkspaceProcessContext) -> EventLogConsumerDaemon:
    """Dagster's retry daemon after its first look, which places it at the event log's end."""
    daemon = EventLogConsumerDaemon()
    with warnings.catch_warnings():
        # That look says it ignores older failures through Logger.warn, which Python deprecates.
        warnings.filterwarnings("ignore", "The 'warn' method is deprecated", DeprecationWarning)
        look_as_the_daemon_does(daemon, process)
    return daemon
