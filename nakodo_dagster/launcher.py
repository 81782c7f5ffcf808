"""The embedded default's run launcher: each run's worker forked from a warm process, not started from nothing.

Dagster's default launcher asks the code server to spawn a fresh Python for every run, which imports Dagster, its
storage and the runs' libraries again: about 2 s of a block run's 6 s slot (docs/scaling.md). This launcher keeps
one fork server per launching process (the daemon) that has imported them once; a run's worker is a fork of it,
running exactly what every other launcher runs (`dagster api execute_run` with the run's arguments). The project's
own code is not preloaded: each worker imports it afresh, so an edited definition takes effect on the next run, as
with the default launcher. On the embedded default's SQLite event log, the worker also keeps the files its events go
to open while it writes them (`_event_log_held_open`), which made writing them three times faster.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing.context import ForkServerContext
from typing import IO, Any, Self

import dagster as dg
from dagster._core.execution import compute_logs
from dagster._core.instance.ref import InstanceRef
from dagster._core.launcher import CheckRunHealthResult, LaunchRunContext, RunLauncher, WorkerStatus
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME
from dagster._grpc.types import ExecuteRunArgs
from dagster._serdes import ConfigurableClass, ConfigurableClassData, deserialize_value, serialize_value

from nakodo_dagster import tags
from nakodo_dagster.terminal import FailuresInOneLine

# What every run worker imports before it reaches the project's code: the run command, and the libraries an
# import run reads and writes with. The instance's own storage modules are added at launch. pandas and
# pyarrow.dataset, which nothing of ours imports: pyarrow and DuckDB import pandas (0.16 s) the first time they take
# in Python values or an Arrow table, and DuckDB pyarrow.dataset (20 to 35 ms) the first time it is handed an Arrow
# stream, as an import run's query over the fetched row groups is.
DEFAULT_PRELOAD = (
    "dagster._cli.api",
    "sqlalchemy",
    "alembic.command",
    "pyarrow.parquet",
    "pyarrow.dataset",
    "duckdb",
    "pandas",
)
# How long a worker asked to stop has to end its run before it is killed: taking back its marks takes a moment.
KILL_GRACE_SECONDS = 60.0
# How long the interrupt of a run past its maximum runtime waits for run monitoring to report the run failed.
OVERRUN_FAILURE_WAIT_SECONDS = 5.0
# How long a launcher being disposed (the daemon stopping: `make run` stopped) waits for the runs it started to end
# cancelled before it kills what is left: well within the 30 s a service manager gives a stop, and within
# `dagster dev`'s wait for its daemon.
STOP_GRACE_SECONDS = 15.0


def execute_run(arguments: str, environment: Mapping[str, str]) -> None:
    """A run's worker: `dagster api execute_run <arguments>`, the command Dagster's launchers give a run's worker,
    in this (forked) process, with the environment the launching process had at launch, as a fresh process of its
    own would have it."""
    from dagster._cli.api import execute_run_command

    os.environ.clear()
    os.environ.update(environment)
    logging.setLoggerClass(FailuresInOneLine)
    compute_logs.tail_to_stream = _copy_to_stream
    run = deserialize_value(arguments, ExecuteRunArgs)
    with _event_log_held_open(run.instance_ref, run.run_id):
        execute_run_command.main(args=[arguments], standalone_mode=False)


@contextlib.contextmanager
def _copy_to_stream(path: str, stream: IO[str]) -> Iterator[tuple[None, None]]:
    """What a step prints, copied from the file Dagster captures it in to the terminal the worker was started with,
    up to the file's last byte when the step ends.

    Dagster copies it with a `tail -F` subprocess that it stops as soon as the step ends, whether or not tail has
    read the last lines yet: on a loaded machine a failed step's STEP_FAILURE line and traceback never reached the
    terminal. A thread of the worker reads to the end before it stops, and spares each step two subprocesses per
    stream (tail and its orphan watcher).
    """
    try:
        terminal = os.fdopen(os.dup(stream.fileno()), "wb")
    except (AttributeError, OSError, ValueError):
        yield (None, None)
        return
    step_ended = threading.Event()

    def copy() -> None:
        with terminal, open(path, "rb") as captured:
            while True:
                # Read once more after the step ended: everything it printed is in the file by then.
                ended = step_ended.is_set()
                if chunk := captured.read(1 << 16):
                    terminal.write(chunk)
                    terminal.flush()
                elif ended:
                    return
                else:
                    step_ended.wait(0.05)

    copier = threading.Thread(target=copy, name=f"copy {os.path.basename(path)}", daemon=True)
    copier.start()
    try:
        yield (None, None)
    finally:
        step_ended.set()
        copier.join(timeout=30)


def _sqlite_event_log(instance: InstanceRef | None) -> SqliteEventLogStorage | None:
    """The instance's event log if it is Dagster's SQLite one; any other is not even opened here."""
    data = instance.event_storage_data if instance else None
    if data is None:
        return None
    storage_class = getattr(importlib.import_module(data.module_name), data.class_name)
    if not issubclass(storage_class, SqliteEventLogStorage):
        return None
    return data.rehydrate(as_type=SqliteEventLogStorage)


@contextlib.contextmanager
def _event_log_held_open(instance: InstanceRef | None, run_id: str) -> Iterator[None]:
    """While the run writes its events, a connection of this process stays open on each SQLite file they go to.

    Dagster's SQLite event log opens and closes a connection for each write (five per imported pair), and SQLite
    checkpoints a database's write-ahead log into it whenever its last connection closes: an idle connection held
    open makes those writes plain appends to the log (a run's events written in a third of the time), and the log
    is checkpointed as usual when it grows. Both files exist by now: the queue wrote the run's first events.
    """
    storage = _sqlite_event_log(instance)
    if storage is None:
        yield
        return
    paths = [storage.path_for_shard(shard) for shard in (INDEX_SHARD_NAME, run_id)]
    with contextlib.ExitStack() as held:
        for path in paths:
            if os.path.exists(path):
                held.enter_context(contextlib.closing(sqlite3.connect(path)))
        yield


class ForkserverRunLauncher(RunLauncher, ConfigurableClass):
    """Launches each run in a process forked from a fork server that has already imported Dagster, the instance's
    storage and ``preload_modules`` (default: pyarrow and DuckDB); the worker tags its run with its pid and host, so
    any process on the host can cancel it and run monitoring can tell when it died."""

    def __init__(self, preload_modules: Sequence[str] = (), inst_data: ConfigurableClassData | None = None) -> None:
        self._inst_data = inst_data
        self._preload = tuple(dict.fromkeys([*DEFAULT_PRELOAD, *preload_modules]))
        self._context: ForkServerContext | None = None
        # The workers this launcher forked, by run id, with each one's start time: the ones still running when it
        # is disposed are cancelled. Forgotten once ended.
        self._workers: dict[str, tuple[int, str]] = {}
        super().__init__()

    @property
    def inst_data(self) -> ConfigurableClassData | None:
        return self._inst_data

    @classmethod
    def config_type(cls) -> dict:
        return {"preload_modules": dg.Field([str], is_required=False, default_value=[])}

    @classmethod
    def from_config_value(cls, inst_data: ConfigurableClassData, config_value: Mapping[str, Any]) -> Self:
        return cls(preload_modules=config_value.get("preload_modules", []), inst_data=inst_data)

    def _fork_server(self) -> ForkServerContext:
        # The fork server starts with the first launch, so it preloads the storage this instance really uses.
        if self._context is None:
            storages = {
                type(storage).__module__ for storage in (self._instance.run_storage, self._instance.event_log_storage)
            }
            context = multiprocessing.get_context("forkserver")
            context.set_forkserver_preload([*self._preload, *sorted(storages)])
            self._context = context
        return self._context

    def launch_run(self, context: LaunchRunContext) -> None:
        run = context.dagster_run
        arguments = ExecuteRunArgs(
            job_origin=run.job_code_origin,  # type: ignore[arg-type]
            run_id=run.run_id,
            instance_ref=self._instance.get_ref(),
        )
        worker = self._fork_server().Process(
            target=execute_run,
            args=(serialize_value(arguments), dict(os.environ)),
            name=f"dagster-run-{run.run_id}",
        )
        # No handle is kept: multiprocessing forgets a finished worker at the next start, closing its descriptors.
        worker.start()
        self._workers = {
            run_id: (pid, started) for run_id, (pid, started) in self._workers.items() if _running(pid, started)
        }
        worker_tags = {tags.RUN_WORKER_PID: str(worker.pid), tags.RUN_WORKER_HOST: socket.gethostname()}
        if (started := _start_time(worker.pid)) is not None:
            self._workers[run.run_id] = (worker.pid, started)
            worker_tags[tags.RUN_WORKER_START] = started
        self._instance.add_run_tags(run.run_id, worker_tags)

    def _worker_pid(self, run: dg.DagsterRun) -> int | None:
        """The pid of the run's worker if it was forked on this host, else None."""
        pid = tags.run_tag(run.tags, tags.RUN_WORKER_PID)
        if pid is None or tags.run_tag(run.tags, tags.RUN_WORKER_HOST) != socket.gethostname():
            return None
        return int(pid)

    def _worker_alive(self, run: dg.DagsterRun, pid: int) -> bool:
        """Whether the run's worker still runs: its pid alive and, where its start was recorded, the same process
        (a pid taken by another process since reads as the worker gone)."""
        started = tags.run_tag(run.tags, tags.RUN_WORKER_START)
        return _alive(pid) if started is None else _running(pid, started)

    def terminate(self, run_id: str) -> bool:
        run = self._instance.get_run_by_id(run_id)
        if not run or run.is_finished:
            return False
        self._instance.report_run_canceling(run)
        pid = self._worker_pid(run)
        if pid is None:
            self._instance.report_engine_event(
                f"Could not cancel the run: its worker was not started on this host ({socket.gethostname()}).",
                run,
                cls=self.__class__,
            )
            return False
        if not self._worker_alive(run, pid):
            return False
        started = _start_time(pid)
        # The worker handles SIGTERM as an interrupt: the step stops, its marks are taken back (marked failed past
        # its run's maximum runtime, imports.run.import_or_release_marks), the run ends CANCELED.
        if self._past_max_runtime(run) and started is not None:
            # Run monitoring stops such a run by reporting it canceling, terminating it, then reporting it failed;
            # a worker that ended in between read it canceling and ended it CANCELED over the failure. Interrupted
            # once it reads as failed, the worker leaves it failed.
            waiter = threading.Thread(target=self._interrupt_once_failed, args=(run.run_id, pid, started), daemon=True)
            waiter.start()
        else:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                return False
        if started is not None:
            # A worker stuck where Python never gets control back (a loop inside a library's native code) sees no
            # interrupt: it is killed, so that it gives back its CPU and memory. Only the same process, not one
            # that took its pid since.
            killer = threading.Timer(KILL_GRACE_SECONDS, _kill_if_still_running, (pid, started))
            killer.daemon = True
            killer.start()
        return True

    def _past_max_runtime(self, run: dg.DagsterRun) -> bool:
        """Whether the run started longer ago than its maximum runtime (its MAX_RUNTIME tag), as run monitoring
        judges it."""
        try:
            seconds = float(run.tags[tags.MAX_RUNTIME])
        except (KeyError, ValueError):
            return False
        record = self._instance.get_run_record_by_id(run.run_id)
        return record is not None and record.start_time is not None and time.time() - record.start_time > seconds

    def _interrupt_once_failed(self, run_id: str, pid: int, started: str) -> None:
        """Interrupt the worker once its run reads as failed, or after OVERRUN_FAILURE_WAIT_SECONDS all the same
        (a cancel from the UI of a run past its maximum runtime, which nobody marks failed)."""
        deadline = time.monotonic() + OVERRUN_FAILURE_WAIT_SECONDS
        while time.monotonic() < deadline:
            run = self._instance.get_run_by_id(run_id)
            if run is None or run.status == dg.DagsterRunStatus.FAILURE:
                break
            time.sleep(0.05)
        if _running(pid, started):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    def dispose(self) -> None:
        """Cancel the runs this launcher started that are still running, as a cancel from the UI does (their marks
        taken back, the runs CANCELED), and wait for them to end.

        The workers are forks of the fork server, not children of the launching process: without this a daemon that
        stops leaves them running with nobody to watch them. What is still running after STOP_GRACE_SECONDS is
        killed; run monitoring fails those runs on the next start.
        """
        running = {run_id: worker for run_id, worker in self._workers.items() if _running(*worker)}
        for run_id in running:
            self.terminate(run_id)
        deadline = time.monotonic() + STOP_GRACE_SECONDS
        while any(_running(*worker) for worker in running.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid, started in running.values():
            _kill_if_still_running(pid, started)
        self._workers.clear()
        self._end_cancelled(list(running))
        super().dispose()

    def _end_cancelled(self, run_ids: list[str]) -> None:
        """Runs whose worker ended without ending them (interrupted while still starting, before its step could
        take its marks back) end CANCELED, and their marks are freed here: the sensor that frees a cancelled run's
        marks does not tick while the daemon is stopped."""
        from nakodo_dagster import settings
        from nakodo_dagster.sensors.failure_sensor import held_marks
        from nakodo_dagster.store import open_store

        unfinished = [run for run in map(self._instance.get_run_by_id, run_ids) if run and not run.is_finished]
        if not unfinished:
            return
        store = open_store(settings.value("NAKODO_DATABASE"))
        for run in unfinished:
            self._instance.report_run_canceled(run, message="Cancelled: the daemon that launched it stopped.")
            marks = held_marks(run, store)
            if marks is not None:
                store.take_back(marks.pairs, marks.stamp)

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: dg.DagsterRun) -> CheckRunHealthResult:
        pid = self._worker_pid(run)
        # Run monitoring fails a run whose worker is anything but running, so a worker this process cannot see (a
        # run launched before this launcher, or on another host) is left alone, as Dagster's default launcher
        # leaves every run.
        if pid is None or self._worker_alive(run, pid):
            return CheckRunHealthResult(WorkerStatus.RUNNING, run_worker_id=str(pid))
        return CheckRunHealthResult(
            WorkerStatus.FAILED, f"the run's worker process (pid {pid}) is gone", run_worker_id=str(pid)
        )


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A process that exited but is not reaped yet still answers the signal; Linux says so in its state.
    stat = _stat(pid)
    return stat[0] != "Z" if stat else not os.path.isdir("/proc")


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the process's name, from its state on; None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()
    # Linux answers a read with ESRCH when the process is reaped between the open and the read.
    except (FileNotFoundError, ProcessLookupError):
        return None


def _start_time(pid: int) -> str | None:
    """When the process started, in clock ticks since boot (field 22 of its stat): with the pid, which process."""
    stat = _stat(pid)
    return stat[19] if stat else None


def _running(pid: int, started: str) -> bool:
    """Whether the process that started at ``started`` still runs (not another that took its pid since)."""
    return _start_time(pid) == started and _alive(pid)


def _kill_if_still_running(pid: int, started: str) -> None:
    if _running(pid, started):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
