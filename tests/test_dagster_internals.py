"""The contract of nakodo_dagster.dagster_internals: each private Dagster name the project relies on still exists, is
called as the project calls it, and still does what the project counts on. A Dagster upgrade that changes one fails
here, by name (`make test-dagster-latest` runs this on the newest Dagster 1.13)."""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import logging
import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar

import dagster as dg
import pytest
from dagster_helpers import look_as_the_daemon_does, started_retry_daemon

from nakodo_dagster import dagster_internals as internals
from nakodo_dagster.dagster_internals import (
    AUTO_RETRY_RUN_ID_TAG,
    INDEX_SHARD_NAME,
    LOG_RECORD_METADATA_ATTR,
    RUN_COMMAND_MODULE,
    RUN_KEY_TAG,
    WILL_RETRY_TAG,
    BulkActionStatus,
    CheckRunHealthResult,
    ConfigurableClass,
    ConfigurableClassData,
    EmptyWorkspaceTarget,
    ExecuteRunArgs,
    InProcessCodeLocationOrigin,
    InProcessWorkspaceLoadTarget,
    InstanceRef,
    InstigatorType,
    JobFailureData,
    JobPythonOrigin,
    LaunchRunContext,
    LoadableTargetOrigin,
    ModuleCodePointer,
    PartitionKeyFilter,
    ReconstructableJob,
    RemoteJobOrigin,
    RemoteRepositoryOrigin,
    RepositoryPythonOrigin,
    RunFailureReason,
    RunLauncher,
    SensorExecutionData,
    SerializableErrorInfo,
    SqliteEventLogStorage,
    StepFailureData,
    StepOutputCopier,
    TickStatus,
    WorkerStatus,
    WorkspaceFileTarget,
    WorkspaceProcessContext,
    capture_interrupts,
    class_from_code_pointer,
    dagster_instance_config,
    process_config,
    raise_interrupts_as,
    replace_step_output_copier,
    report_partition_planned,
    retry_daemon_read_up_to,
    runs_the_queue_starts,
    should_retry,
)
from nakodo_dagster.launcher import ForkserverRunLauncher

# The functions and methods the project calls, with the parameters it passes, in order, by name.
CALLED_AS = {
    "process_config": (process_config, ["config_type", "config_dict"]),
    "dagster_instance_config": (dagster_instance_config, ["base_dir"]),
    "class_from_code_pointer": (class_from_code_pointer, ["module_name", "class_name"]),
    "should_retry": (should_retry, ["run", "instance"]),
    "consume_new_runs_for_automatic_reexecution": (
        internals.consume_new_runs_for_automatic_reexecution,
        ["workspace_process_context", "run_records", "logger"],
    ),
    "execute_backfill_iteration": (internals.execute_backfill_iteration, ["workspace_process_context", "logger"]),
    "check_run_timeout": (internals.check_run_timeout, ["instance", "run_record", "logger", "default_timeout_seconds"]),
    "MonitoringDaemon": (internals.MonitoringDaemon, ["interval_seconds"]),
    "MonitoringDaemon.run_iteration": (internals.MonitoringDaemon.run_iteration, ["self", "workspace_process_context"]),
    "EventLogConsumerDaemon.run_iteration": (
        internals.EventLogConsumerDaemon.run_iteration,
        ["self", "workspace_process_context"],
    ),
    "WorkspaceProcessContext": (WorkspaceProcessContext, ["instance", "workspace_load_target"]),
    "InProcessWorkspaceLoadTarget": (InProcessWorkspaceLoadTarget, ["origin"]),
    "InProcessCodeLocationOrigin": (InProcessCodeLocationOrigin, ["loadable_target_origin"]),
    "JobPythonOrigin": (JobPythonOrigin, ["job_name", "repository_origin"]),
    "RepositoryPythonOrigin": (RepositoryPythonOrigin, ["executable_path", "code_pointer", "container_image"]),
    "ReconstructableJob.for_file": (ReconstructableJob.for_file, ["python_file", "fn_name"]),
    "LaunchRunContext": (LaunchRunContext, ["dagster_run", "workspace"]),
    "CheckRunHealthResult": (CheckRunHealthResult, ["status", "msg"]),
    "ConfigurableClassData": (ConfigurableClassData, ["module_name", "class_name", "config_yaml"]),
    "ExecuteRunArgs": (ExecuteRunArgs, ["job_origin", "run_id", "instance_ref"]),
    "JobFailureData": (JobFailureData, ["error", "failure_reason", "first_step_failure_event"]),
    "StepFailureData": (StepFailureData, ["error", "user_failure_data"]),
    "SerializableErrorInfo": (SerializableErrorInfo, ["message", "stack", "cls_name", "cause", "context"]),
    "SqliteEventLogStorage.path_for_shard": (SqliteEventLogStorage.path_for_shard, ["self", "run_id"]),
    "RunLauncher.launch_run": (RunLauncher.launch_run, ["self", "context"]),
    "RunLauncher.terminate": (RunLauncher.terminate, ["self", "run_id"]),
    "RunLauncher.check_run_worker_health": (RunLauncher.check_run_worker_health, ["self", "run"]),
    "DagsterEvent.build_asset_materialization_planned_event": (
        dg.DagsterEvent.build_asset_materialization_planned_event,
        ["job_name", "step_key", "asset_materialization_planned_data"],
    ),
    "compute_logs.tail_to_stream": (internals.compute_logs.tail_to_stream, ["path", "stream"]),
    "raise_interrupts_as": (raise_interrupts_as, ["error_cls"]),
}
# Tags Dagster writes and reads, by their values: the project and its queries match on them.
TAGS = {
    "AUTO_RETRY_RUN_ID_TAG": (AUTO_RETRY_RUN_ID_TAG, "dagster/auto_retry_run_id"),
    "WILL_RETRY_TAG": (WILL_RETRY_TAG, "dagster/will_retry"),
    "RUN_KEY_TAG": (RUN_KEY_TAG, "dagster/run_key"),
}


@pytest.mark.parametrize("name", sorted(CALLED_AS))
def test_each_adapted_call_takes_the_parameters_the_project_passes(name):
    function, passed = CALLED_AS[name]
    parameters = list(inspect.signature(function).parameters)
    assert parameters[: len(passed)] == passed, f"{name}{inspect.signature(function)} no longer takes {passed}"


@pytest.mark.parametrize("name", sorted(TAGS))
def test_each_dagster_tag_keeps_its_value(name):
    value, expected = TAGS[name]
    assert value == expected


def test_the_enums_keep_the_members_the_project_reads():
    assert {WorkerStatus.RUNNING, WorkerStatus.FAILED} <= set(WorkerStatus)
    assert {RunFailureReason.RUN_EXCEPTION, RunFailureReason.STEP_FAILURE} <= set(RunFailureReason)
    assert {BulkActionStatus.REQUESTED, BulkActionStatus.COMPLETED_SUCCESS} <= set(BulkActionStatus)
    assert InstigatorType.SENSOR in set(InstigatorType)
    assert {TickStatus.SUCCESS, TickStatus.SKIPPED} <= set(TickStatus)


def test_code_origins_build_as_the_tests_build_them(tmp_path):
    target = LoadableTargetOrigin(executable_path=sys.executable, module_name="nakodo_dagster.definitions")
    location = InProcessCodeLocationOrigin(target, location_name="nakodo_dagster")
    job = RemoteJobOrigin(RemoteRepositoryOrigin(location, "__repository__"), "import_places")
    assert job.job_name == "import_places" and job.repository_origin.code_location_origin == location
    pointer = ModuleCodePointer("nakodo_dagster.definitions", "defs", None)
    python = JobPythonOrigin("import_places", RepositoryPythonOrigin(sys.executable, pointer, container_image="x"))
    assert python.repository_origin.container_image == "x"
    assert isinstance(WorkspaceFileTarget([str(tmp_path / "workspace.yaml")]).paths, list)
    assert EmptyWorkspaceTarget() is not None
    assert PartitionKeyFilter(key="cell:1,2|cafe").key == "cell:1,2|cafe"
    storage_method = inspect.signature(SqliteEventLogStorage.get_latest_asset_check_execution_by_key)
    assert "partition_filter" in storage_method.parameters


def test_the_launcher_is_a_whole_run_launcher_dagster_loads_from_its_config():
    assert issubclass(ForkserverRunLauncher, RunLauncher) and issubclass(ForkserverRunLauncher, ConfigurableClass)
    assert not inspect.isabstract(ForkserverRunLauncher), "Dagster's RunLauncher asks for a method it lacks"
    processed = process_config(ForkserverRunLauncher.config_type(), {"preload_modules": ["json"]})
    assert processed.success and processed.value == {"preload_modules": ["json"]}
    assert not process_config(ForkserverRunLauncher.config_type(), {"preload_modules": "json"}).success
    assert class_from_code_pointer("nakodo_dagster.launcher", "ForkserverRunLauncher") is ForkserverRunLauncher
    data = ConfigurableClassData("nakodo_dagster.launcher", "ForkserverRunLauncher", "preload_modules: [json]\n")
    launcher = data.rehydrate(as_type=RunLauncher)
    assert isinstance(launcher, ForkserverRunLauncher) and launcher.inst_data == data
    assert launcher.supports_check_run_worker_health
    health = CheckRunHealthResult(WorkerStatus.FAILED, "gone", run_worker_id="7")
    assert (health.status, health.msg, health.run_worker_id) == (WorkerStatus.FAILED, "gone", "7")


def test_the_instance_config_loads_as_dagster_loads_it(tmp_path):
    (tmp_path / "dagster.yaml").write_text(
        "run_launcher:\n  module: nakodo_dagster.launcher\n  class: ForkserverRunLauncher\n"
    )
    config, custom_class = dagster_instance_config(str(tmp_path))
    assert config["run_launcher"]["class"] == "ForkserverRunLauncher" and custom_class is None


def test_a_run_worker_is_handed_its_run_and_instance_as_every_launcher_hands_them(tmp_path):
    command = importlib.import_module(RUN_COMMAND_MODULE).execute_run_command
    assert [parameter.name for parameter in command.params][:1] == ["input_json"]
    job_file = tmp_path / "job.py"
    job_file.write_text(
        "import dagster as dg\n\n@dg.op\ndef hello():\n    pass\n\n@dg.job\ndef hello_job():\n    hello()\n"
    )
    recon = ReconstructableJob.for_file(str(job_file), "hello_job")
    assert recon.get_definition().name == "hello_job"
    with dg.instance_for_test() as instance:
        run = instance.create_run_for_job(recon.get_definition(), job_code_origin=recon.get_python_origin())
        arguments = ExecuteRunArgs(job_origin=run.job_code_origin, run_id=run.run_id, instance_ref=instance.get_ref())
        handed = dg.deserialize_value(dg.serialize_value(arguments), ExecuteRunArgs)
        assert (handed.run_id, handed.instance_ref) == (run.run_id, instance.get_ref())
        assert isinstance(handed.instance_ref, InstanceRef) and handed.instance_ref.event_storage_data is not None
        assert LaunchRunContext(dagster_run=run, workspace=None).dagster_run == run


def test_the_embedded_event_log_is_sqlite_with_an_index_file_and_a_file_per_run():
    with dg.instance_for_test() as instance:
        result = _hello_job.execute_in_process(instance=instance)
        data = instance.get_ref().event_storage_data
        assert issubclass(getattr(importlib.import_module(data.module_name), data.class_name), SqliteEventLogStorage)
        storage = data.rehydrate(as_type=SqliteEventLogStorage)
        for shard in (INDEX_SHARD_NAME, result.run_id):
            assert os.path.isfile(storage.path_for_shard(shard)), shard


@dg.op
def _prints() -> None:
    print("a step's own line")


@dg.job
def _hello_job() -> None:
    _prints()


def test_a_replaced_step_output_copier_copies_every_steps_output():
    copied: list[str] = []

    @contextlib.contextmanager
    def copier(path, stream):
        yield (None, None)
        copied.append(Path(path).read_text())

    with dg.instance_for_test() as instance:
        original: StepOutputCopier = replace_step_output_copier(copier)
        try:
            assert _hello_job.execute_in_process(instance=instance).success
        finally:
            assert replace_step_output_copier(original) is copier
    assert "a step's own line\n" in copied, "Dagster no longer copies a step's output through it"


def test_a_missing_step_output_copier_is_said_rather_than_set(monkeypatch):
    monkeypatch.delattr(internals.compute_logs, "tail_to_stream")
    with pytest.raises(RuntimeError, match="no longer copies a step's output"):
        replace_step_output_copier(lambda path, stream: contextlib.nullcontext((None, None)))


class _Kept(logging.Handler):
    """Keeps every record a logger of a run hands it."""

    records: ClassVar[list[logging.LogRecord]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dg.logger
def _keeping(_) -> logging.Logger:
    kept = logging.getLogger("nakodo-dagster-internals-contract")
    kept.handlers = [_Kept()]
    return kept


@dg.op
def _fails() -> None:
    raise ValueError("the step's own error")


@dg.job(logger_defs={"keeping": _keeping})
def _failing_job() -> None:
    _fails()


def test_a_run_failures_log_record_carries_its_event_which_repeats_the_steps_error():
    # A run's worker prints each failure in one line, a run's failure pointing at its step's (terminal.py).
    _Kept.records.clear()
    with dg.instance_for_test() as instance:
        result = _failing_job.execute_in_process(
            instance=instance, raise_on_error=False, run_config={"loggers": {"keeping": {}}}
        )
    assert not result.success
    events = {
        id(record): getattr(record, LOG_RECORD_METADATA_ATTR)["dagster_event"]
        for record in _Kept.records
        if getattr(record, LOG_RECORD_METADATA_ATTR, {}).get("dagster_event") is not None
    }
    [(record, data)] = [
        (record, events[id(record)].event_specific_data)
        for record in _Kept.records
        if id(record) in events and events[id(record)].event_type == dg.DagsterEventType.RUN_FAILURE
    ]
    assert isinstance(data, JobFailureData) and data.first_step_failure_event is not None and data.error
    appended = getattr(data, "error_display_string", data.error.to_string())
    assert isinstance(record.msg, str) and record.msg.endswith(f"\n\n{appended}")
    assert "the step's own error" in data.error.to_string()


def test_dagster_runs_again_a_run_whose_worker_died_not_one_whose_step_failed():
    # The embedded default's settings: a step that failed on the data would fail the same way again.
    retries = {"run_retries": {"enabled": True, "max_retries": 1, "retry_on_asset_or_op_failure": False}}
    with dg.instance_for_test(overrides=retries) as instance:
        died = instance.create_run_for_job(_hello_job)
        instance.report_run_failed(died)
        assert should_retry(instance.get_run_by_id(died.run_id), instance)
        assert instance.get_run_by_id(died.run_id).tags[WILL_RETRY_TAG] == "true"

        step_failed = instance.create_run_for_job(_hello_job)
        reason = JobFailureData(error=None, failure_reason=RunFailureReason.STEP_FAILURE)
        instance.report_run_failed(step_failed, job_failure_data=reason)
        assert not should_retry(instance.get_run_by_id(step_failed.run_id), instance)


def test_the_retry_daemon_passes_by_a_failure_it_reads_before_the_run_reads_failed():
    # Dagster records a failure in three writes: the event, then the run's status, then its will-retry tag. Its
    # retry daemon, looking between the first two, reads a run that has not failed and moves past it for good. The
    # import sensor gives up at once on a failure the daemon has read and not retried (retry_daemon_read_up_to),
    # rather than after the launch grace. If Dagster retries such a run one day, that early give-up can go.
    retries = {"run_retries": {"enabled": True, "max_retries": 1, "retry_on_asset_or_op_failure": False}}
    with (
        dg.instance_for_test(overrides=retries) as instance,
        WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as process,
    ):
        retry_daemon = started_retry_daemon(process)
        assert retry_daemon_read_up_to(instance) is not None, "its first look starts at the log's end"
        run = instance.create_run_for_job(_hello_job)
        died = dg.DagsterEvent(
            dg.DagsterEventType.RUN_FAILURE.value,
            run.job_name,
            message="its worker died",
            event_specific_data=JobFailureData(error=None, failure_reason=RunFailureReason.RUN_EXCEPTION),
        )
        logged = dg.EventLogEntry(
            error_info=None,
            level=logging.ERROR,
            user_message="",
            run_id=run.run_id,
            timestamp=time.time(),
            dagster_event=died,
        )
        instance.event_log_storage.store_event(logged)
        look_as_the_daemon_does(retry_daemon, process)
        instance.run_storage.handle_run_event(run.run_id, died, datetime.now(UTC))
        instance.add_run_tags(run.run_id, {WILL_RETRY_TAG: "true"})
        look_as_the_daemon_does(retry_daemon, process)

        (failure,) = instance.fetch_run_status_changes(dg.DagsterEventType.RUN_FAILURE, limit=2).records
        assert retry_daemon_read_up_to(instance) == failure.storage_id
        passed_by = instance.get_run_by_id(run.run_id)
        assert passed_by.status == dg.DagsterRunStatus.FAILURE and passed_by.tags[WILL_RETRY_TAG] == "true"
        assert AUTO_RETRY_RUN_ID_TAG not in passed_by.tags, "Dagster now retries a failure it read early"


def test_a_partition_planned_in_a_failed_run_reads_as_failed():
    areas = dg.StaticPartitionsDefinition(["north", "south"])

    @dg.asset(partitions_def=areas)
    def places_like() -> None:
        pass

    with dg.instance_for_test() as instance:
        run = instance.create_run_for_job(_hello_job)
        instance.report_run_failed(run)
        report_partition_planned(instance, run, "_prints", places_like.key, "north")
        status = instance.get_status_by_partition(places_like.key, ["north", "south"], areas)
    assert status == {"north": dg.AssetPartitionStatus.FAILED, "south": None}


def test_the_queue_starts_queued_runs_up_to_its_tag_limit():
    queue = {
        "run_coordinator": {
            "module": "dagster",
            "class": "QueuedRunCoordinator",
            "config": {"tag_concurrency_limits": [{"key": "kind", "value": "import", "limit": 1}]},
        }
    }
    location = InProcessCodeLocationOrigin(LoadableTargetOrigin(module_name=__name__), location_name="here")
    origin = RemoteJobOrigin(RemoteRepositoryOrigin(location, "__repository__"), _hello_job.name)
    with dg.instance_for_test(overrides=queue) as instance:
        runs = [
            instance.create_run_for_job(_hello_job, tags={"kind": "import"}, remote_job_origin=origin) for _ in range(2)
        ]
        for run in runs:
            instance.run_coordinator.submit_run(dg.SubmitRunContext(run, workspace=None))  # type: ignore[arg-type]
        assert [run.run_id for run in runs_the_queue_starts(instance)] == [runs[0].run_id]


def test_a_sensor_tick_hands_back_its_requests_as_sensor_execution_data():
    @dg.sensor(job=_hello_job)
    def asks(_):
        return dg.RunRequest(run_key="one")

    with dg.instance_for_test() as instance, dg.build_sensor_context(instance=instance) as context:
        data = asks.evaluate_tick(context)
    assert isinstance(data, SensorExecutionData)
    assert [request.run_key for request in data.run_requests] == ["one"]
    assert data.skip_message is None and not data.dynamic_partitions_requests


def test_an_interrupt_is_raised_as_the_error_given():
    with (
        pytest.raises(dg.DagsterExecutionInterruptedError),
        capture_interrupts(),
        raise_interrupts_as(dg.DagsterExecutionInterruptedError),
    ):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)


def test_a_run_failures_error_keeps_its_chain():
    cause = SerializableErrorInfo("psycopg2.OperationalError: gone\n", [], "OperationalError")
    error = SerializableErrorInfo("x.Error: outer\n", [], "Error", cause=cause)
    step = StepFailureData(error=error, user_failure_data=None)
    failure = JobFailureData(error=error, failure_reason=RunFailureReason.RUN_EXCEPTION)
    assert (step.error.cause.message, failure.error.cls_name) == (cause.message, "Error")
    assert failure.first_step_failure_event is None
    assert "outer" in error.to_string()


def test_every_adapted_name_is_checked_here():
    # A name added to the adapter without a check here would break unnoticed on the next upgrade.
    tree = ast.parse(Path(__file__).read_text())
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    used |= {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
    assert [name for name in internals.__all__ if name not in used] == []
