"""An import that fails, is killed or is cancelled frees its own pairs at once, and only its own: the failure
sensor marks a killed run's pairs failed (at the failure's time, with why), the cancel sensor and the run itself
take a cancelled run's back."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml
from dagster_helpers import look_as_the_daemon_does, started_retry_daemon
from overture_helpers import CURRENT as RELEASE
from store_helpers import count_places

from nakodo_dagster import tags
from nakodo_dagster.assets.places import places
from nakodo_dagster.dagster_internals import (
    AUTO_RETRY_RUN_ID_TAG,
    EmptyWorkspaceTarget,
    InProcessCodeLocationOrigin,
    InProcessWorkspaceLoadTarget,
    JobFailureData,
    LoadableTargetOrigin,
    RunFailureReason,
    SerializableErrorInfo,
    StepFailureData,
    WorkspaceProcessContext,
    capture_interrupts,
    consume_new_runs_for_automatic_reexecution,
    raise_interrupts_as,
)
from nakodo_dagster.duckdb_connection import in_memory
from nakodo_dagster.headless import register_partitions
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.imports.interrupts import interrupts_delivered
from nakodo_dagster.imports.run import _interrupt_behind
from nakodo_dagster.jobs.by_hand import reimport_places
from nakodo_dagster.jobs.import_places import import_payload, import_places
from nakodo_dagster.overture.index import index_path
from nakodo_dagster.partitions import AREA, CATEGORY, places_partition
from nakodo_dagster.placement import LAUNCH_GRACE_MINUTES, Cutoffs, PointLocation, Targeting
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.failure_sensor import held_marks, import_cancel_sensor, import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor, request_import_runs
from nakodo_dagster.store import Store
from nakodo_dagster.store.duckdb_store import _thread_lock

DAGSTER_YAML = Path(__file__).parents[2] / "nakodo_dagster" / "data" / "dagster.yaml"
LEEDS = Targeting((PointLocation(53.7997, -1.5492, 10),), ("cafe",))
Pair = tuple[str, str]


def _states(store: Store, pairs: Iterable[Pair]) -> dict[Pair, str]:
    """Each pair as every policy reads it: fresh, coming, failed or missing (no row)."""
    pairs = sorted(set(pairs))
    cutoffs = Cutoffs.at(datetime.now(UTC))
    rows = {(r.area, r.category): r for r in store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})}
    return {p: cutoffs.row_state(rows[p]) if p in rows else "missing" for p in pairs}


def _request(instance: dg.DagsterInstance, resources: dict) -> dg.RunRequest:
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)
    return ticked.run_requests[0]


def _pairs(request: dg.RunRequest) -> list[Pair]:
    return [tuple(pair) for pair in import_payload(request.run_config)["pairs"]]


def _status_event(instance: dg.DagsterInstance, run_id: str, event_type: dg.DagsterEventType) -> dg.DagsterEvent:
    (record,) = instance.get_records_for_run(run_id, of_type=event_type).records
    return record.event_log_entry.dagster_event


def _evaluate_cancel_sensor(instance: dg.DagsterInstance, resources: dict, run_id: str) -> None:
    """One evaluation of import_cancel_sensor for this cancelled run, as the daemon makes it."""
    return import_cancel_sensor(
        dg.build_run_status_sensor_context(
            sensor_name=import_cancel_sensor.name,
            dagster_event=_status_event(instance, run_id, dg.DagsterEventType.RUN_CANCELED),
            dagster_instance=instance,
            dagster_run=instance.get_run_by_id(run_id),
            resources=resources,
        )
    )


def _fail_as_run_monitoring_does(
    instance: dg.DagsterInstance, resources: dict, run: dg.DagsterRun, failure: JobFailureData | None = None
) -> None:
    """What run monitoring records when a run's worker was killed (or the run itself, given its ``failure``), then
    one evaluation of the failure sensor."""
    instance.report_run_failed(run, job_failure_data=failure)
    context = dg.build_run_status_sensor_context(
        sensor_name=import_failure_sensor.name,
        dagster_event=_status_event(instance, run.run_id, dg.DagsterEventType.RUN_FAILURE),
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run.run_id),
        resources=resources,
    ).for_run_failure()
    return import_failure_sensor(context)


def test_a_killed_import_run_stops_the_wait(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    request = _request(instance, resources)
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    assert set(_states(store, _pairs(request)).values()) == {"coming"}

    failed_at = datetime.now(UTC)
    _fail_as_run_monitoring_does(instance, resources, run)

    assert set(_states(store, _pairs(request)).values()) == {"failed"}
    rows = store.import_rows({a for a, _ in _pairs(request)}, {c for _, c in _pairs(request)})
    assert all(failed_at <= row.imported_at <= datetime.now(UTC) for row in rows), "the failure's own time"
    assert {row.failure for row in rows} == {
        f"import run {run.run_id} failed: This run has been marked as failed from outside the execution context."
    }
    [progress] = store.search_progress(datetime.now(UTC))
    assert (progress.failed, progress.coming, progress.pending(True)) == (progress.areas, 0, 0)


def test_a_run_that_failed_outside_its_steps_says_on_what(instance, resources):
    # A run worker that failed outside any step (its disk full) fails the run with Dagster's "An exception was
    # thrown during execution." and no more, unless the exception is named.
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    request = _request(instance, resources)
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    error = SerializableErrorInfo("OSError: [Errno 28] No space left on device\n", [], "OSError")

    _fail_as_run_monitoring_does(
        instance, resources, run, JobFailureData(error=error, failure_reason=RunFailureReason.RUN_EXCEPTION)
    )

    rows = store.import_rows({a for a, _ in _pairs(request)}, {c for _, c in _pairs(request)})
    assert {row.failure for row in rows} == {
        f"import run {run.run_id} failed: This run has been marked as failed from outside the execution context: "
        "OSError: [Errno 28] No space left on device"
    }


_POSTGRES_GONE = SerializableErrorInfo(
    'psycopg2.OperationalError: connection to server at "127.0.0.1", port 5432 failed: Connection refused\n',
    [],
    "OperationalError",
)


def _step_failed(run: dg.DagsterRun, error: SerializableErrorInfo) -> JobFailureData:
    """A run's failure whose step failed with ``error``, as the worker reports it."""
    step_failure = dg.DagsterEvent(
        event_type_value=dg.DagsterEventType.STEP_FAILURE.value,
        job_name=run.job_name,
        step_key="import_block",
        event_specific_data=StepFailureData(error=error, user_failure_data=None),
    )
    return JobFailureData(
        error=None, failure_reason=RunFailureReason.STEP_FAILURE, first_step_failure_event=step_failure
    )


@pytest.mark.parametrize(
    "failure",
    [
        # Outside any step, its retries spent.
        lambda run: JobFailureData(
            error=SerializableErrorInfo(
                "dagster_postgres.utils.DagsterPostgresException: too many retries for DB connection\n",
                [],
                "DagsterPostgresException",
                cause=_POSTGRES_GONE,
            ),
            failure_reason=RunFailureReason.RUN_EXCEPTION,
        ),
        # In its step, writing an event: Dagster runs a run whose step failed again no more.
        lambda run: _step_failed(
            run,
            SerializableErrorInfo(
                "sqlalchemy.exc.OperationalError: (psycopg2.OperationalError) server closed the connection\n",
                [],
                "OperationalError",
                context=_POSTGRES_GONE,
            ),
        ),
    ],
    ids=["outside-its-step", "in-its-step"],
)
def test_a_run_that_lost_dagsters_storage_leaves_its_pairs_to_be_asked_for_again(instance, resources, failure):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    request = _request(instance, resources)
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)

    _fail_as_run_monitoring_does(instance, resources, run, failure(run))

    assert set(_states(store, _pairs(request)).values()) == {"missing"}, "not failed for 7 days"
    again = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    assert sorted(p for r in again.run_requests for p in _pairs(r)) == sorted(_pairs(request))


def test_a_step_that_failed_on_the_data_marks_its_pairs_failed(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    request = _request(instance, resources)
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    unreadable = SerializableErrorInfo("duckdb.InvalidInputException: No magic bytes found at end of file\n", [], "x")

    _fail_as_run_monitoring_does(instance, resources, run, _step_failed(run, unreadable))

    assert set(_states(store, _pairs(request)).values()) == {"failed"}


def test_an_older_run_failing_leaves_a_newer_mark_on_its_pair_alone(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    request = _request(instance, resources)
    run = instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
    mine = _pairs(request)[0]
    # An analyst re-imports one of the run's pairs by hand while the run is still going: a newer mark.
    analyst = store.force_request([mine], datetime.now(UTC) + timedelta(seconds=1))

    _fail_as_run_monitoring_does(instance, resources, run)

    states = _states(store, _pairs(request))
    assert states.pop(mine) == "coming", "the analyst's import is on its way; campaigns keep waiting for it"
    assert set(states.values()) == {"failed"}
    assert [r.imported_at for r in store.import_rows([mine[0]], [mine[1]])] == [analyst]


def test_a_run_cancelled_while_queued_frees_its_pairs(resources):
    # The project's queue: a run waits there until the daemon starts it, and the UI cancels it from there.
    with dg.instance_for_test(
        overrides={"run_coordinator": {"module": "dagster", "class": "QueuedRunCoordinator"}}
    ) as instance:
        store = resources["store"].store
        store.add_campaign("Leeds", LEEDS)
        request = _request(instance, resources)
        run = _queue(instance, request)
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.QUEUED

        assert instance.run_coordinator.cancel_run(run.run_id)
        _evaluate_cancel_sensor(instance, resources, run.run_id)

        assert set(_states(store, _pairs(request)).values()) == {"missing"}
        again = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        assert sorted(p for r in again.run_requests for p in _pairs(r)) == sorted(_pairs(request))


@contextlib.contextmanager
def _code_location(instance: dg.DagsterInstance) -> Iterator[WorkspaceProcessContext]:
    """The code location loaded in this process, as the daemon sees it."""
    origin = LoadableTargetOrigin(executable_path=sys.executable, module_name="nakodo_dagster.definitions")
    # Dagster warns about its own beta `owners` parameter whenever it binds resources to a sensor on load.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        target = InProcessWorkspaceLoadTarget(InProcessCodeLocationOrigin(origin))
        with WorkspaceProcessContext(instance, target) as process:
            yield process


def _queue(instance: dg.DagsterInstance, request: dg.RunRequest) -> dg.DagsterRun:
    """Submit the run a request asks for as the daemon does: to the run queue, from the code location."""
    with _code_location(instance) as process:
        workspace = process.create_request_context()
        (location,) = workspace.code_locations
        remote_job = location.get_repository("__repository__").get_full_job(import_places.name)
        run = instance.create_run_for_job(
            import_places,
            run_config=request.run_config,
            tags=request.tags,
            remote_job_origin=remote_job.get_remote_origin(),
            job_code_origin=remote_job.get_python_origin(),
        )
        return instance.submit_run(run.run_id, workspace)


def _frames_of(thread: threading.Thread) -> list[str]:
    frame, names = sys._current_frames().get(thread.ident), []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return names


def _wait_for(predicate, what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_an_interrupted_import_takes_its_marks_back_before_it_stops(instance, duckdb_url, release_root):
    # The interruption Dagster raises in the op when a run is cancelled (SIGINT, or SIGTERM from the launcher),
    # delivered while the op waits for the store to write its pairs. DuckDB: the wait is this process's lock.
    resources = {"store": StoreResource(database=duckdb_url), "overture": OvertureResource(root=release_root)}
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    request = _request(instance, resources)
    main = threading.current_thread()
    store_lock = _thread_lock(Path(duckdb_url).resolve())

    def cancel_while_writing() -> None:
        _wait_for(lambda: "execute_import" in _frames_of(main), "the import to start")
        with store_lock:
            _wait_for(lambda: "write_import" in _frames_of(main), "the import to wait for the store")
            os.kill(os.getpid(), signal.SIGINT)
            _wait_for(lambda: "write_import" not in _frames_of(main), "the interruption")

    canceller = threading.Thread(target=cancel_while_writing, daemon=True)
    canceller.start()
    result = import_places.execute_in_process(
        run_config=request.run_config, tags=request.tags, instance=instance, resources=resources, raise_on_error=False
    )
    canceller.join(timeout=60)

    assert not result.success
    assert set(_states(store, _pairs(request)).values()) == {"missing"}, "never imported, free to ask for again"
    assert count_places(store, _pairs(request)) == {}


def test_an_interrupt_landing_inside_a_duckdb_query_reads_as_a_cancel():
    # DuckDB stops its query at the interrupt and raises its own error from it; an import that marked its pairs
    # failed for that would keep them from every campaign for a week after a cancel.
    with (
        pytest.raises(Exception) as raised,
        # Closed, and its scan interrupted, as the block ends: a connection left to the garbage collector waited on its
        # worker thread's scan of a trillion rows, and hung the test that happened to collect it.
        in_memory() as connection,
        capture_interrupts(),
        raise_interrupts_as(dg.DagsterExecutionInterruptedError),
    ):
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
        connection.execute("SELECT count(*) FROM range(1000000000000)").fetchall()
    assert not isinstance(raised.value, dg.DagsterExecutionInterruptedError), "DuckDB no longer wraps it: simplify"
    assert isinstance(_interrupt_behind(raised.value), dg.DagsterExecutionInterruptedError)
    assert _interrupt_behind(duckdb.InvalidInputException("Invalid Input Error: no such column")) is None


def test_a_cancel_landing_in_a_garbage_collector_callback_still_stops_the_import():
    # Seen in a cancelled import: Dagster's interrupt raised inside one of SQLAlchemy's weakref callbacks, where
    # Python only prints "Exception ignored", and the run went on to succeed.
    class Held:
        pass

    def collected(_: weakref.ref) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.5)  # The handler runs in here, and its error cannot leave a callback.

    with (
        pytest.raises(dg.DagsterExecutionInterruptedError),
        capture_interrupts(),
        raise_interrupts_as(dg.DagsterExecutionInterruptedError),
        interrupts_delivered(),
    ):
        held = Held()
        reference = weakref.ref(held, collected)
        del held
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            time.sleep(0.01)
    assert reference() is None


def _analyst_run(home: Path, database_url: str, root: Path, pair: Pair, cwd: Path) -> subprocess.Popen:
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "NAKODO_DATABASE": database_url,
        "NAKODO_OVERTURE_ROOT": str(root),
        "NAKODO_OVERTURE_RELEASE": "",
    }
    dagster = Path(sys.executable).with_name("dagster")
    command = [str(dagster), "asset", "materialize", "--select", "places", "--partition", "|".join(pair)]
    return subprocess.Popen(
        [*command, "-m", "nakodo_dagster.definitions"],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        # A group of its own, killed whole as a pod is: Dagster's log capture runs `tail` children beside it.
        start_new_session=True,
    )


def test_a_killed_analyst_run_reads_as_failed_like_a_killed_sensor_run(
    tmp_path, database_url, release_root, monkeypatch
):
    # The release's index is a pipe nobody writes: the analyst's run blocks reading it until it is killed.
    monkeypatch.setenv("NAKODO_OVERTURE_INDEX", str(tmp_path / "overture_index"))
    index = index_path(release_root, RELEASE, tmp_path / "overture_index")
    index.parent.mkdir(parents=True)
    os.mkfifo(index)
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    resources = {"store": StoreResource(database=database_url), "overture": OvertureResource(root="")}
    store = resources["store"].store
    pair = ("cell:53.5,-2", "cafe")
    with dg.DagsterInstance.get() as instance:
        instance.add_dynamic_partitions(AREA, [pair[0]])
        instance.add_dynamic_partitions(CATEGORY, [pair[1]])
        worker = _analyst_run(home, database_url, Path(release_root), pair, tmp_path)
        try:

            def stamped() -> list[dg.DagsterRun]:
                return [r for r in instance.get_runs() if tags.STAMP in r.tags]

            _wait_for(lambda: stamped() or worker.poll() is not None, "the analyst's run to mark its pair", 120)
            assert worker.poll() is None, "the run blocks reading the release until it is killed"
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        (run,) = stamped()
        assert run.tags[f"{tags.PARTITION}/{AREA}"] == pair[0]
        assert _states(store, [pair]) == {pair: "coming"}

        _fail_as_run_monitoring_does(instance, resources, run)

    assert _states(store, [pair]) == {pair: "failed"}, "blocked for a week, as a killed sensor run's pair is"
    [row] = store.import_rows([pair[0]], [pair[1]])
    # Recorded as what happened: failed after it was asked for, not dated back, and why.
    assert tags.stamp_from_tag(run.tags[tags.STAMP]) < row.imported_at <= datetime.now(UTC)
    assert row.failure.startswith(f"import run {run.run_id} failed: ")


@pytest.mark.parametrize("status", [dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED])
def test_runs_that_are_not_imports_are_left_alone(instance, resources, status):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    request = _request(instance, resources)

    @dg.op
    def nothing() -> None:
        """Does nothing."""

    @dg.job(tags={tags.STAMP: request.tags[tags.STAMP]})
    def not_an_import() -> None:
        nothing()

    run = instance.create_run_for_job(not_an_import)
    if status == dg.DagsterRunStatus.FAILURE:
        _fail_as_run_monitoring_does(instance, resources, run)
    else:
        instance.report_run_canceled(run)
        _evaluate_cancel_sensor(instance, resources, run.run_id)

    assert set(_states(store, _pairs(request)).values()) == {"coming"}


def _tick(sensor: dg.RunStatusSensorDefinition, instance: dg.DagsterInstance, resources: dict, cursor: str | None):
    """One tick of a run status sensor as the daemon makes it: every run whose status changed since ``cursor``."""
    with dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor) as context:
        return sensor.evaluate_tick(context)


@pytest.mark.parametrize("sensor", [import_failure_sensor, import_cancel_sensor], ids=lambda s: s.name)
def test_one_tick_handles_an_import_and_a_run_that_is_not_one(instance, resources, sensor):
    # After a restart one tick meets every run that ended meanwhile: imports and searches alike.
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    request = _request(instance, resources)
    started = _tick(sensor, instance, resources, None)

    @dg.op
    def nothing() -> None:
        """Does nothing."""

    @dg.job
    def not_an_import() -> None:
        nothing()

    runs = [
        instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags),
        instance.create_run_for_job(not_an_import),
    ]
    for run in runs:
        if sensor is import_failure_sensor:
            instance.report_run_failed(run)
        else:
            instance.report_run_canceled(run)

    ticked = _tick(sensor, instance, resources, started.cursor)

    assert ticked.skip_message is None
    assert len(ticked.dagster_run_reactions) == 2
    assert not [r for r in ticked.dagster_run_reactions if r.error], [r.error for r in ticked.dagster_run_reactions]
    expected = "failed" if sensor is import_failure_sensor else "missing"
    assert set(_states(store, _pairs(request)).values()) == {expected}


def test_a_killed_backfill_run_of_several_partitions_reads_as_failed(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    pairs = _pairs(_request(instance, resources))
    # A backfill's run of the places asset over a stretch of partitions, killed once it had marked its pairs.
    stamp = store.force_request(pairs, datetime.now(UTC))
    first, last = (str(places_partition(*pair)) for pair in (pairs[0], pairs[-1]))
    # The job bound to this test's store, as the code location binds it to NAKODO_DATABASE's.
    job = dg.Definitions(assets=[places], jobs=[reimport_places], resources=resources).resolve_job_def(
        reimport_places.name
    )
    run = instance.create_run_for_job(
        job,
        asset_selection={PLACES},
        tags={
            "dagster/asset_partition_range_start": first,
            "dagster/asset_partition_range_end": last,
            tags.STAMP: tags.stamp_tag(stamp),
        },
    )

    _fail_as_run_monitoring_does(instance, resources, run)

    assert set(_states(store, pairs).values()) == {"failed"}, "no campaign waits six hours on them"


def _retry_as_the_daemon_does(process: WorkspaceProcessContext, run: dg.DagsterRun) -> dg.DagsterRun | None:
    """What Dagster's retry daemon does with a failed run: the run it queued in its place, or None."""
    instance = process.instance
    for _ in consume_new_runs_for_automatic_reexecution(
        process, [instance.get_run_record_by_id(run.run_id)], logging.getLogger(__name__)
    ):
        pass
    retry_id = instance.get_run_by_id(run.run_id).tags.get(AUTO_RETRY_RUN_ID_TAG)
    return instance.get_run_by_id(retry_id) if retry_id else None


def test_an_import_whose_worker_died_is_run_again_with_its_marks_until_its_retries_are_spent(resources):
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance, _code_location(instance) as process:
        store = resources["store"].store
        store.add_campaign("Leeds", LEEDS)
        request = _request(instance, resources)
        attempt = _queue(instance, request)
        marks = held_marks(attempt, store)
        for _ in range(settings["run_retries"]["max_retries"]):
            _fail_as_run_monitoring_does(instance, resources, attempt)
            assert set(_states(store, _pairs(request)).values()) == {"coming"}, "its retry is on its way"
            attempt = _retry_as_the_daemon_does(process, attempt)
            assert attempt is not None and attempt.status == dg.DagsterRunStatus.QUEUED
            assert held_marks(attempt, store) == marks, "the retry imports under the same marks"

        _fail_as_run_monitoring_does(instance, resources, attempt)
        assert _retry_as_the_daemon_does(process, attempt) is None

    assert set(_states(store, _pairs(request)).values()) == {"failed"}
    rows = store.import_rows({a for a, _ in _pairs(request)}, {c for _, c in _pairs(request)})
    assert {row.failure.partition(":")[0] for row in rows} == {f"import run {attempt.run_id} failed"}


def test_an_import_whose_step_failed_is_not_run_again(resources):
    # A step fails on the data (an unreadable release, bad input): a retry would meet the same.
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance, _code_location(instance) as process:
        store = resources["store"].store
        store.add_campaign("Leeds", LEEDS)
        request = _request(instance, resources)
        run = _queue(instance, request)

        step_failed = JobFailureData(error=None, failure_reason=RunFailureReason.STEP_FAILURE)
        _fail_as_run_monitoring_does(instance, resources, run, step_failed)

        assert _retry_as_the_daemon_does(process, run) is None
    assert set(_states(store, _pairs(request)).values()) == {"failed"}


def _pairs_asked(instance: dg.DagsterInstance, resources: dict, at: datetime) -> list[Pair]:
    """The pairs the import sensor asks for in a tick at ``at``."""
    ticked = request_import_runs(instance, resources["store"].store, resources["overture"], at, logging.getLogger())
    return sorted(pair for request in ticked.run_requests for pair in _pairs(request))


def test_the_marks_of_a_run_dagster_could_not_run_again_are_asked_for_again_at_the_next_tick(resources):
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance:
        store = resources["store"].store
        store.add_campaign("Leeds", LEEDS)
        # The retry daemon of a daemon just started, its code location not loaded: the retry cannot be launched.
        with WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as nowhere:
            retry_daemon = started_retry_daemon(nowhere)
            request = _request(instance, resources)
            run = _queue(instance, request)
            _fail_as_run_monitoring_does(instance, resources, run)
            assert set(_states(store, _pairs(request)).values()) == {"coming"}, "left for its retry"
            look_as_the_daemon_does(retry_daemon, nowhere)

        assert AUTO_RETRY_RUN_ID_TAG not in instance.get_run_by_id(run.run_id).tags
        assert _pairs_asked(instance, resources, datetime.now(UTC)) == sorted(_pairs(request)), "asked for again"


def test_the_marks_of_a_failed_run_are_left_for_its_retry_until_the_launch_grace_if_the_daemon_is_down(resources):
    # Dagster's retry daemon has not read the failure yet: its retry may still come, once the daemon is back.
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance:
        store = resources["store"].store
        store.add_campaign("Leeds", LEEDS)
        with WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as nowhere:
            started_retry_daemon(nowhere)
        request = _request(instance, resources)
        _fail_as_run_monitoring_does(instance, resources, _queue(instance, request))

        assert _pairs_asked(instance, resources, datetime.now(UTC)) == [], "its retry may still come"
        later = datetime.now(UTC) + timedelta(minutes=LAUNCH_GRACE_MINUTES, seconds=1)
        assert _pairs_asked(instance, resources, later) == sorted(_pairs(request)), "asked for again"
