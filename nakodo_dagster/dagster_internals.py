"""The parts of Dagster's private API (its `dagster._` modules) the project relies on, all in this one module.

Dagster's public API (`import dagster as dg`) covers definitions, sensors, instances and their tests; it has no
public home yet for what a run launcher of one's own needs, for a run failure's error, or for the daemons the tests
run one iteration at a time. Nothing else in the package, its tests or the bench imports from `dagster._`: they import
the names below, each with why it is used and what would replace it. tests/test_dagster_internals.py checks that
every one still exists with the signature and behaviour relied on, so a Dagster upgrade that changes one fails that
test by name (and `make test-dagster-latest` runs it on the newest Dagster 1.13), not a run in production.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import IO

import dagster as dg

# Grouped by what each serves, not sorted: each group's comment says why it is used and what would replace it.
# isort: off
# --- The embedded default's run launcher (launcher.py) ------------------------------------------------------------
# A run launcher is a RunLauncher that is also a ConfigurableClass (dagster.yaml names it by module and class), told
# what to launch by a LaunchRunContext and asked by run monitoring for a CheckRunHealthResult of its worker. Dagster
# documents them as the extension points of its instance, but only under `dagster._`. Replaced by the public names
# once Dagster exports them; without them, Dagster's DefaultRunLauncher (a fresh process per run: 2 s more a run).
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, RunLauncher, WorkerStatus

# The instance a worker is to write to, as the launcher hands it over: the worker reads which event log it has.
from dagster._core.instance.ref import InstanceRef

# What every launcher hands a run's worker: the arguments of `dagster api execute_run`. Replaced by nothing short of
# starting that command in a process of its own (the default launcher), which the fork server exists to avoid.
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import ConfigurableClass, ConfigurableClassData

# The console logger's records carry their Dagster event under this attribute: a run's worker prints each failure
# in one line from it (terminal.py). No public reader of a log record's event exists.
from dagster._core.log_manager import LOG_RECORD_METADATA_ATTR

# The embedded default's SQLite event log, whose files (the index shard and the run's own) a worker keeps open while
# it writes: three times faster writes. Replaced by nothing while the embedded default stores its events in SQLite.
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME

# What a step prints is copied to the worker's terminal by this module's `tail_to_stream`, which Dagster looks up
# each time a step starts; replace_step_output_copier swaps it.
from dagster._core.execution import compute_logs

# --- Run failures and retries (sensors/failure_sensor.py, sensors/import_sensor.py) -------------------------------
# A run failure event's data: its error (cause and context chained), its reason, its first step's failure. The
# failure sensor tells a run that lost Dagster's own storage from an import that failed. RunFailureSensorContext has
# no public reader of the error behind a failure; StepFailureData and RunFailureReason build failures in tests.
from dagster._core.events import AssetMaterializationPlannedData, JobFailureData, RunFailureReason, StepFailureData
from dagster._utils.error import SerializableErrorInfo

# Dagster's own decision whether a failed run is run again (run_retries in dagster.yaml), the one its retry daemon
# acts on (a run whose worker, pod or daemon died is run again, a run whose step failed is not), and the tags it
# writes: on the failed run whether it will be retried, and the retry's id. Replaced by a public retry decision if
# Dagster offers one; a copy of its rules would drift from what the daemon really does.
from dagster._daemon.auto_run_reexecution.auto_run_reexecution import should_retry
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG

# How far Dagster's retry daemon has read the run failures, under the key it keeps in the instance's daemon cursors:
# a failure it has read and left without a retry is never retried (retry_daemon_read_up_to). Replaced by a public
# reader of the daemon's progress, or by nothing once Dagster writes a run's status with its failure event.
from dagster._daemon.auto_run_reexecution.event_log_consumer import _create_cursor_key as retry_daemon_cursor_key

# --- Only the tests and the bench -------------------------------------------------------------------------------
# The instance's config as Dagster validates it: deploy/ and dagster.yaml checked without a cluster or a server
# (the public DagsterInstance.from_config would connect to the storage they name).
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config
from dagster._serdes.config_class import class_from_code_pointer

# Where a run's code lives, as the webserver, the daemon and dagster-k8s's launcher record it, and a code location
# loaded in the test's own process. Most tests need none and use `dg.instance_for_test` alone; those that run what
# the daemon runs need a code location, and Dagster has no public way to load one.
from dagster._core.code_pointer import ModuleCodePointer
from dagster._core.definitions.reconstruct import ReconstructableJob
from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
from dagster._core.remote_origin import InProcessCodeLocationOrigin, RemoteJobOrigin, RemoteRepositoryOrigin
from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import EmptyWorkspaceTarget, InProcessWorkspaceLoadTarget, WorkspaceFileTarget

# One iteration of a daemon, in the test's process: the queue, run monitoring, run retries, backfills. Dagster's
# public test utilities evaluate sensors and schedules, not the daemons that act on their runs.
from dagster._daemon.daemon import MonitoringDaemon
from dagster._daemon.run_coordinator.queued_run_coordinator_daemon import QueuedRunCoordinatorDaemon
from dagster._daemon.auto_run_reexecution.auto_run_reexecution import consume_new_runs_for_automatic_reexecution
from dagster._daemon.auto_run_reexecution.event_log_consumer import EventLogConsumerDaemon
from dagster._daemon.backfill import execute_backfill_iteration
from dagster._daemon.monitoring.run_monitoring import check_run_timeout

# What the daemons and the UI record and read: a backfill's status, a sensor's ticks, a tick's result, a check's
# latest execution for one partition, a run requested under a run key. Replaced by the GraphQL queries the UI makes
# (dagster_graphql's test utilities), at the cost of a query and a loaded workspace in each test.
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.definitions.sensor_definition import SensorExecutionData
from dagster._core.event_api import PartitionKeyFilter
from dagster._core.storage.tags import RUN_KEY_TAG

# How a run worker turns SIGINT and SIGTERM into DagsterExecutionInterruptedError inside a step: the tests deliver
# a cancel as a worker receives it. Replaced by nothing public short of running a whole worker.
from dagster._utils.interrupts import capture_interrupts, raise_interrupts_as
# isort: on

# The module a run's worker runs (`dagster api execute_run`): the fork server imports it before any run.
RUN_COMMAND_MODULE = "dagster._cli.api"

# The signature of what copies a step's captured output to the worker's terminal: (captured file, terminal stream),
# a context manager that yields the pids of the processes it started, if any.
StepOutputCopier = Callable[[str, IO[str]], AbstractContextManager[tuple[int | None, int | None]]]


def execute_run_command(arguments: str) -> None:
    """`dagster api execute_run <arguments>` in this process, as a run's worker runs it: serialized ExecuteRunArgs
    in, the run executed. The command line is imported here, not with this module: the webserver and the daemon, which
    only load the launcher, never run it; the fork server imports it once for every worker (RUN_COMMAND_MODULE)."""
    from dagster._cli.api import execute_run_command as command

    command.main(args=[arguments], standalone_mode=False)


def replace_step_output_copier(copier: StepOutputCopier) -> StepOutputCopier:
    """Make ``copier`` what copies each step's captured output to the terminal, in this process; returns the one it
    replaces. Dagster copies it with a `tail -F` subprocess it stops when the step ends, read to the end or not
    (launcher._copy_to_stream says what that lost). Replaced by nothing public: Dagster's compute log managers
    capture to files and choose the copier themselves.

    Raises RuntimeError if Dagster no longer copies a step's output through this function, rather than setting a
    name nothing reads and losing the copy without a word."""
    replaced = getattr(compute_logs, "tail_to_stream", None)
    if not callable(replaced):
        raise RuntimeError(
            "This Dagster no longer copies a step's output to the terminal with compute_logs.tail_to_stream: "
            "nakodo_dagster.dagster_internals.replace_step_output_copier needs adapting to it."
        )
    compute_logs.tail_to_stream = copier
    return replaced


def report_partition_planned(
    instance: dg.DagsterInstance, run: dg.DagsterRun, step_key: str, asset_key: dg.AssetKey, partition: str
) -> None:
    """Record that ``run``'s step ``step_key`` was to materialise ``partition`` of ``asset_key``, as Dagster records
    it when it plans a run of an asset's partitions.

    Dagster 1.13 has no public way for an op to say which asset partitions it was materialising. The partition
    status the UI shows (and `DagsterInstance.get_status_by_partition`) is built from these planned events: a
    partition planned in a failed run and not materialised since reads as failed. (A failed materialisation's own
    event is not read back by the open-source event log.) Replaced by a public report of a failed materialisation
    once the UI's partition status reads one."""
    planned = AssetMaterializationPlannedData(asset_key, partition=partition)
    event = dg.DagsterEvent.build_asset_materialization_planned_event(run.job_name, step_key, planned)
    instance.report_dagster_event(event, run.run_id)


def retry_daemon_read_up_to(instance: dg.DagsterInstance) -> int | None:
    """The storage id of the last run failure Dagster's retry daemon has read and acted on (retried the run or
    passed it by), or None before its first look. Compare with `DagsterInstance.fetch_run_status_changes`' ids.

    A failure read is done with: the daemon moves past it once its retries are created, and never reads it again.
    It can pass a failure by that deserved a retry. Dagster stores a failure event first, then the run's status,
    then the run's will-retry tag, in three writes; a look between the first two sees a run that has not failed,
    and does not retry it (seen after a daemon restart under load, the run tagged to be retried and never retried).
    """
    key = retry_daemon_cursor_key(dg.DagsterEventType.RUN_FAILURE)
    value = instance.daemon_cursor_storage.get_cursor_values({key}).get(key)
    return None if value is None else int(value)


def runs_the_queue_starts(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """The queued runs the daemon's run queue would start now, by its own choice (priorities, tag limits, pools),
    without starting them. A method of Dagster's queue daemon that even its own module keeps private."""
    daemon = QueuedRunCoordinatorDaemon(interval_seconds=1)
    return daemon._get_runs_to_dequeue(instance, instance.get_concurrency_config(), fixed_iteration_time=None)


__all__ = [
    "AUTO_RETRY_RUN_ID_TAG",
    "INDEX_SHARD_NAME",
    "LOG_RECORD_METADATA_ATTR",
    "RUN_COMMAND_MODULE",
    "RUN_KEY_TAG",
    "WILL_RETRY_TAG",
    "BulkActionStatus",
    "CheckRunHealthResult",
    "ConfigurableClass",
    "ConfigurableClassData",
    "EmptyWorkspaceTarget",
    "EventLogConsumerDaemon",
    "ExecuteRunArgs",
    "InProcessCodeLocationOrigin",
    "InProcessWorkspaceLoadTarget",
    "InstanceRef",
    "InstigatorType",
    "JobFailureData",
    "JobPythonOrigin",
    "LaunchRunContext",
    "LoadableTargetOrigin",
    "ModuleCodePointer",
    "MonitoringDaemon",
    "PartitionKeyFilter",
    "ReconstructableJob",
    "RemoteJobOrigin",
    "RemoteRepositoryOrigin",
    "RepositoryPythonOrigin",
    "RunFailureReason",
    "RunLauncher",
    "SensorExecutionData",
    "SerializableErrorInfo",
    "SqliteEventLogStorage",
    "StepFailureData",
    "StepOutputCopier",
    "TickStatus",
    "WorkerStatus",
    "WorkspaceFileTarget",
    "WorkspaceProcessContext",
    "capture_interrupts",
    "check_run_timeout",
    "class_from_code_pointer",
    "consume_new_runs_for_automatic_reexecution",
    "dagster_instance_config",
    "execute_backfill_iteration",
    "execute_run_command",
    "process_config",
    "raise_interrupts_as",
    "replace_step_output_copier",
    "report_partition_planned",
    "retry_daemon_read_up_to",
    "runs_the_queue_starts",
    "should_retry",
]
