"""The embedded default's run launcher on a real instance: a run's worker is a fork of a warm process, runs the
project's code as it is now, can be cancelled from any process on the host, and is seen dying."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import dagster as dg
import pytest
import yaml
from dagster._core.definitions.reconstruct import ReconstructableJob
from dagster._core.launcher import WorkerStatus
from dagster._daemon.monitoring.run_monitoring import check_run_timeout

from nakodo_dagster import launcher as launcher_module
from nakodo_dagster import tags
from nakodo_dagster.imports.failure import run_overrun
from nakodo_dagster.launcher import ForkserverRunLauncher

DAGSTER_YAML = Path(__file__).parents[2] / "nakodo_dagster" / "data" / "dagster.yaml"
# A job the test writes to a file of its own, so a run's worker must import it from there, as it imports the
# project's definitions.
JOBS = """
import os
import signal
import time
from pathlib import Path

import dagster as dg

ANSWER = {answer!r}


@dg.op
def answer() -> None:
    Path(os.environ["LAUNCHER_TEST_OUT"]).write_text(f"{{ANSWER}} {{os.getpid()}} {{os.getppid()}}")


@dg.op
def wait() -> None:
    try:
        time.sleep(120)
    except BaseException:
        Path(os.environ["LAUNCHER_TEST_OUT"]).write_text("interrupted")
        raise


@dg.op
def stubborn() -> None:
    # As a loop inside a library's native code would: no interrupt reaches Python.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(os.environ["LAUNCHER_TEST_OUT"]).write_text("ignoring interrupts")
    time.sleep(120)


@dg.op
def fail() -> None:
    try:
        raise KeyError("the cause")
    except KeyError as cause:
        raise ValueError("the headline") from cause


@dg.job(executor_def=dg.in_process_executor)
def answer_job():
    answer()


# In one process: a step subprocess's output reaches the terminal through Dagster's compute-log tee, which may not
# have flushed when the run ends.
@dg.job(executor_def=dg.in_process_executor)
def failing_job():
    fail()


@dg.job(executor_def=dg.in_process_executor)
def stubborn_job():
    stubborn()


@dg.job(executor_def=dg.in_process_executor)
def wait_job():
    wait()
"""
_FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}


@pytest.fixture
def instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dg.DagsterInstance]:
    """A real instance with the project's run launcher, as the embedded default's dagster.yaml configures it."""
    monkeypatch.setenv("LAUNCHER_TEST_OUT", str(tmp_path / "out.txt"))
    launcher = yaml.safe_load(DAGSTER_YAML.read_text())["run_launcher"]
    home = tmp_path / "home"
    home.mkdir()
    with dg.instance_for_test(overrides={"run_launcher": launcher}, temp_dir=str(home)) as instance:
        yield instance


def _write_jobs(folder: Path, answer: str) -> Path:
    path = folder / "launcher_jobs.py"
    path.write_text(JOBS.format(answer=answer))
    # The worker checks the source's time stamp against its cached bytecode: make the edit visibly newer.
    later = time.time() + 2
    os.utime(path, (later, later))
    return path


def _launch(instance: dg.DagsterInstance, path: Path, job_name: str, run_tags: dict[str, str] | None = None) -> str:
    recon = ReconstructableJob.for_file(str(path), job_name)
    run = instance.create_run_for_job(recon.get_definition(), job_code_origin=recon.get_python_origin(), tags=run_tags)
    instance.launch_run(run.run_id, workspace=None)  # type: ignore[arg-type]
    return run.run_id


def _wait_for(instance: dg.DagsterInstance, run_id: str, statuses: set[dg.DagsterRunStatus]) -> dg.DagsterRun:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        assert run is not None
        if run.status in statuses:
            return run
        time.sleep(0.1)
    raise AssertionError(f"run {run_id} stayed {run.status}")


def test_the_embedded_default_forks_each_runs_worker_from_the_fork_server(instance, tmp_path):
    assert isinstance(instance.run_launcher, ForkserverRunLauncher)
    path = _write_jobs(tmp_path, "first")
    run = _wait_for(instance, _launch(instance, path, "answer_job"), _FINISHED)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    answer, pid, parent = (tmp_path / "out.txt").read_text().split()
    assert answer == "first"
    # The worker's parent is the fork server, not this process.
    assert int(pid) != os.getpid() and int(parent) != os.getpid()
    assert run.tags[tags.RUN_WORKER_PID] == pid


# Launches failing_job on the instance in argv[1] from the job file in argv[2], waits for it to end, prints its id.
_LAUNCH_AND_WAIT = """
import sys, time
import dagster as dg
from dagster._core.definitions.reconstruct import ReconstructableJob

with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
    recon = ReconstructableJob.for_file(sys.argv[2], "failing_job")
    run = instance.create_run_for_job(recon.get_definition(), job_code_origin=recon.get_python_origin())
    instance.launch_run(run.run_id, workspace=None)
    while not instance.get_run_by_id(run.run_id).is_finished:
        time.sleep(0.1)
    print("launched", run.run_id)
"""


def test_a_run_launched_without_loggers_prints_info_and_its_failure_in_one_line(tmp_path):
    # As the UI's Materialize launches a run: no logger in its run config, on the embedded default's instance. In a
    # process of its own: what its fork server's workers print is what a terminal shows (this process's fork server
    # may date from another test, with that test's captured output).
    home = tmp_path / "home"
    home.mkdir()
    (home / "dagster.yaml").symlink_to(DAGSTER_YAML)
    jobs = _write_jobs(tmp_path, "first")
    done = subprocess.run(
        [sys.executable, "-c", _LAUNCH_AND_WAIT, str(home), str(jobs)],
        env={**os.environ, "DAGSTER_HOME": str(home), "LAUNCHER_TEST_OUT": str(tmp_path / "out.txt")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    printed = done.stdout + done.stderr
    assert done.returncode == 0, printed
    run_id = done.stdout.split("launched ")[1].split()[0]

    assert " - DEBUG - " not in printed, printed
    (step_failure,) = [line for line in printed.splitlines() if " - STEP_FAILURE - " in line]
    (run_failure,) = [line for line in printed.splitlines() if " - RUN_FAILURE - " in line]
    # The step's failure in one line, what it raised in words; the run's failure points at it.
    assert step_failure.endswith(
        'Execution of step "fail" failed: ValueError: the headline (its traceback is in the run\'s event log)'
    ), step_failure
    assert run_failure.endswith("Steps failed: ['fail']. The step's failure is above."), run_failure
    assert "Stack Trace" not in printed and "the cause" not in printed, printed
    # Every event is still whole in the event log, for the UI: the traceback and the chain of causes.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
        records = instance.all_logs(run_id)
    logged = {record.dagster_event_type for record in records}
    assert {dg.DagsterEventType.STEP_START, dg.DagsterEventType.RUN_FAILURE} <= logged
    (failure,) = [r for r in records if r.dagster_event_type == dg.DagsterEventType.STEP_FAILURE]
    error = failure.dagster_event.step_failure_data.error.to_string()
    assert "ValueError: the headline" in error and "KeyError: 'the cause'" in error and "Stack Trace" in error


def test_a_run_runs_the_code_as_it_is_when_launched_not_as_it_was_when_the_fork_server_started(instance, tmp_path):
    path = _write_jobs(tmp_path, "before the edit")
    _wait_for(instance, _launch(instance, path, "answer_job"), _FINISHED)
    assert (tmp_path / "out.txt").read_text().startswith("before the edit ")
    _write_jobs(tmp_path, "after the edit")
    run = _wait_for(instance, _launch(instance, path, "answer_job"), _FINISHED)
    assert run.status == dg.DagsterRunStatus.SUCCESS
    assert (tmp_path / "out.txt").read_text().startswith("after the edit ")


def test_cancelling_a_run_interrupts_its_step_and_ends_it_canceled(instance, tmp_path):
    run_id = _launch(instance, _write_jobs(tmp_path, "unused"), "wait_job")
    _wait_for(instance, run_id, {dg.DagsterRunStatus.STARTED})
    # A fresh launcher, as in the webserver's process: it reaches the worker through the run's tags.
    other = ForkserverRunLauncher()
    other.register_instance(instance)
    deadline = time.monotonic() + 30
    while not instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_START).records:
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    assert other.terminate(run_id)
    run = _wait_for(instance, run_id, _FINISHED)
    assert run.status == dg.DagsterRunStatus.CANCELED
    assert (tmp_path / "out.txt").read_text() == "interrupted"


def _wait_for_text(path: Path, text: str) -> None:
    deadline = time.monotonic() + 30
    while not (path.exists() and path.read_text() == text):
        assert time.monotonic() < deadline, f"the step never wrote {text!r}"
        time.sleep(0.1)


def test_run_monitoring_fails_a_run_past_its_max_runtime_and_interrupts_its_step(instance, tmp_path):
    run_id = _launch(instance, _write_jobs(tmp_path, "unused"), "wait_job", {tags.MAX_RUNTIME: "1"})
    _wait_for(instance, run_id, {dg.DagsterRunStatus.STARTED})
    deadline = time.monotonic() + 30
    while not instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_START).records:
        assert time.monotonic() < deadline, "the step never started"
        time.sleep(0.1)
    time.sleep(1.5)
    # What the daemon's run monitoring does on each look at a started run, after checking its worker.
    check_run_timeout(instance, instance.get_run_record_by_id(run_id), logging.getLogger(__name__), 0)
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE
    _wait_for_text(tmp_path / "out.txt", "interrupted")
    run = instance.get_run_by_id(run_id)
    deadline = time.monotonic() + 30
    while instance.run_launcher.check_run_worker_health(run).status != WorkerStatus.FAILED:
        assert time.monotonic() < deadline, "the interrupted worker never ended"
        time.sleep(0.1)
    assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.FAILURE, "the worker's end leaves it failed"


def test_a_worker_that_ignores_its_interrupt_is_killed(instance, tmp_path, monkeypatch):
    monkeypatch.setattr(launcher_module, "KILL_GRACE_SECONDS", 1.0)
    run_id = _launch(instance, _write_jobs(tmp_path, "unused"), "stubborn_job")
    run = _wait_for(instance, run_id, {dg.DagsterRunStatus.STARTED})
    _wait_for_text(tmp_path / "out.txt", "ignoring interrupts")
    assert instance.run_launcher.terminate(run_id)
    time.sleep(0.5)
    assert instance.run_launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING
    deadline = time.monotonic() + 30
    while (health := instance.run_launcher.check_run_worker_health(run)).status != WorkerStatus.FAILED:
        assert time.monotonic() < deadline, f"the worker still reads as {health.status} after its grace"
        time.sleep(0.1)


def test_run_monitoring_sees_a_worker_that_died(instance, tmp_path):
    run_id = _launch(instance, _write_jobs(tmp_path, "unused"), "wait_job")
    run = _wait_for(instance, run_id, {dg.DagsterRunStatus.STARTED})
    launcher = instance.run_launcher
    assert launcher.supports_check_run_worker_health
    assert launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING
    os.kill(int(run.tags[tags.RUN_WORKER_PID]), signal.SIGKILL)
    deadline = time.monotonic() + 30
    while (health := launcher.check_run_worker_health(run)).status != WorkerStatus.FAILED:
        assert time.monotonic() < deadline, f"a killed worker still reads as {health.status}"
        time.sleep(0.1)
    assert run.tags[tags.RUN_WORKER_PID] in (health.msg or "")


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads a process's start from /proc")
def test_a_dead_workers_pid_taken_by_another_process_reads_as_gone(instance, tmp_path):
    # Pids wrap within minutes on a busy host: a killed worker's pid taken by a new process kept its run "running",
    # and its import slot taken, for good.
    run_id = _launch(instance, _write_jobs(tmp_path, "unused"), "wait_job")
    run = _wait_for(instance, run_id, {dg.DagsterRunStatus.STARTED})
    os.kill(int(run.tags[tags.RUN_WORKER_PID]), signal.SIGKILL)
    with subprocess.Popen(["sleep", "60"]) as other:
        try:
            instance.add_run_tags(run_id, {tags.RUN_WORKER_PID: str(other.pid)})
            health = instance.run_launcher.check_run_worker_health(instance.get_run_by_id(run_id))
            assert health.status == WorkerStatus.FAILED
            assert not instance.run_launcher.terminate(run_id), "the process that took the pid is left alone"
            assert other.poll() is None
        finally:
            other.kill()


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads a process's state from /proc")
def test_a_worker_reaped_while_its_state_is_read_reads_as_gone(instance, tmp_path, monkeypatch):
    """Between opening /proc/<pid>/stat and reading it the worker's parent can reap it; Linux then fails the read
    with ESRCH, which must read as a dead worker, not stop run monitoring."""
    run_id = _launch(instance, _write_jobs(tmp_path, "unused"), "answer_job")
    run = _wait_for(instance, run_id, _FINISHED)
    worker = subprocess.Popen(["sleep", "120"])
    worker.send_signal(signal.SIGKILL)
    exited = run.with_tags({**run.tags, tags.RUN_WORKER_PID: str(worker.pid)})

    def open_then_reap(path: str) -> IO[str]:
        opened = open(path)  # noqa: SIM115 - the launcher closes it
        worker.wait()
        return opened

    monkeypatch.setattr(launcher_module, "open", open_then_reap, raising=False)
    assert instance.run_launcher.check_run_worker_health(exited).status == WorkerStatus.FAILED


def test_a_run_launched_elsewhere_is_left_to_its_own_launcher(instance, tmp_path):
    run_id = _launch(instance, _write_jobs(tmp_path, "unused"), "answer_job")
    run = _wait_for(instance, run_id, _FINISHED)
    elsewhere = run.with_tags({**run.tags, tags.RUN_WORKER_HOST: "another-host"})
    assert instance.run_launcher.check_run_worker_health(elsewhere).status == WorkerStatus.RUNNING


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads a process's open files from /proc")
def test_a_worker_keeps_its_event_log_files_open_while_it_writes(instance, tmp_path):
    """Dagster closes its SQLite connection after each event; the worker's own stays open on both files, so the
    closes do not checkpoint the log each time."""
    run_id = _launch(instance, _write_jobs(tmp_path, "unused"), "wait_job")
    run = _wait_for(instance, run_id, {dg.DagsterRunStatus.STARTED})
    folder = Path(instance.event_log_storage.path_for_shard(run_id)).parent
    fds = Path(f"/proc/{run.tags[tags.RUN_WORKER_PID]}/fd")
    open_files = {str(link.readlink()) for link in fds.iterdir() if link.is_symlink()}
    assert {str(folder / "index.db"), str(folder / f"{run_id}.db")} <= open_files
    instance.run_launcher.terminate(run_id)
    _wait_for(instance, run_id, _FINISHED)


@pytest.mark.parametrize(("limit", "deadline_after_start"), [("90", timedelta(seconds=90)), (None, None)])
def test_an_import_knows_when_its_run_passes_its_max_runtime(limit, deadline_after_start):
    seen = []

    @dg.op
    def look(context) -> None:
        seen.append(run_overrun(context))

    @dg.job(tags={tags.MAX_RUNTIME: limit} if limit else {})
    def timed():
        look()

    with dg.instance_for_test() as instance:
        result = timed.execute_in_process(instance=instance)
        started = datetime.fromtimestamp(instance.get_run_record_by_id(result.run_id).start_time, UTC)
    if deadline_after_start is None:
        assert seen == [None]
    else:
        [(deadline, reason)] = seen
        assert deadline == started + deadline_after_start
        assert "within 1.5 minutes of starting" in reason
