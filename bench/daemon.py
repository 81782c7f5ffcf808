"""Import runs through the real daemon: the project's dagster.yaml (queued run coordinator, two import runs at a
time), its run launcher (each run's worker forked from a warm process), a DuckDB store; where each run's time goes.

``python -m bench.daemon [--runs N] [--release-root PATH] [--instance embedded|postgres] [--launcher
project|dagster]`` prints the figures as JSON. ``embedded`` is the embedded default's instance
(nakodo_dagster/data/dagster.yaml, SQLite under a fresh DAGSTER_HOME); ``postgres`` is the production instance
(deploy/production/dagster.yaml) with its storage in a fresh database on ``--postgres``'s server and, in place of
Kubernetes', the launcher ``--launcher`` names: the project's, or Dagster's default (a fresh process per run).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import dagster as dg
import yaml

from bench.policy import scratch_database
from nakodo_dagster import tags
from nakodo_dagster.dagster_internals import WorkspaceFileTarget, WorkspaceProcessContext
from nakodo_dagster.jobs.import_places import import_places, import_run_config
from nakodo_dagster.overture.sample import write_sample_release
from nakodo_dagster.placement import BLOCK_DEGREES, ImportRun, cell, import_runs
from nakodo_dagster.store import Store, open_store

PROJECT = Path(__file__).parents[1]
MODULE = "nakodo_dagster.definitions"
CATEGORIES = ("bakery", "cafe", "restaurant")
# Western Europe, where the sample release's cities are: blocks row by row from its south-west corner.
FIRST_BLOCK = (40.0, -6.0)
BLOCKS_PER_ROW = 10
INSTANCES = {
    "embedded": PROJECT / "nakodo_dagster" / "data" / "dagster.yaml",
    "postgres": PROJECT / "deploy" / "production" / "dagster.yaml",
}
# How each run's worker starts: the embedded default's launcher (forked from a warm process), or Dagster's default
# one (the code server spawns a fresh Python per run).
LAUNCHERS = ("project", "dagster")
DEFAULT_POSTGRES = "postgresql://postgres@127.0.0.1:5432/test"
# Import runs at once: the project's dagster.yaml limits runs tagged nakodo/kind=import to two.
IMPORT_SLOTS = 2
# The engine event the run's new process writes once it has loaded Dagster and the instance, before the code
# location: it splits the launch into starting the process and loading the definitions.
PROCESS_STARTED = "process_started"
_PROCESS_STARTED_MESSAGE = "Started process for run"
# The steps of a run's life, in order; each figure is the median time from one to the next.
TIMELINE = (
    dg.DagsterEventType.RUN_ENQUEUED,
    dg.DagsterEventType.RUN_STARTING,
    PROCESS_STARTED,
    dg.DagsterEventType.RUN_START,
    dg.DagsterEventType.STEP_START,
    # The op logs its materialisations and check evaluations at the end: from the first one on, the step only
    # writes events.
    dg.DagsterEventType.ASSET_MATERIALIZATION,
    dg.DagsterEventType.STEP_SUCCESS,
    dg.DagsterEventType.RUN_SUCCESS,
)
_FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
# A run should take seconds; a daemon that makes no progress for this long is broken, not slow.
_STALL_SECONDS = 180


def block_runs(count: int) -> list[ImportRun]:
    """``count`` distinct 4 x 4 blocks, every cell missing CATEGORIES: one import run each."""
    runs: list[ImportRun] = []
    for number in range(count):
        south = FIRST_BLOCK[0] + BLOCK_DEGREES * (number // BLOCKS_PER_ROW)
        west = FIRST_BLOCK[1] + BLOCK_DEGREES * (number % BLOCKS_PER_ROW)
        cells = {c.key: c for c in (cell(south + i / 2, west + j / 2) for i in range(4) for j in range(4))}
        runs += import_runs({key: list(CATEGORIES) for key in cells}, cells)
    return runs


def _workspace(folder: Path) -> Path:
    # The runs' working directory is the temporary folder: the release index they write lands there.
    path = folder / "workspace.yaml"
    path.write_text(
        yaml.safe_dump({"load_from": [{"python_module": {"module_name": MODULE, "working_directory": str(folder)}}]})
    )
    return path


def stop_group(process: subprocess.Popen) -> None:
    """Stop a process started in a group of its own, and everything it started: SIGTERM, and SIGKILL after 30 s."""
    # Gone already if the caller killed the whole group, as a node loss does.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@contextlib.contextmanager
def running_daemon(workspace: Path, environ: Mapping[str, str], log: Path) -> Iterator[subprocess.Popen]:
    """A ``dagster-daemon run`` of ``workspace`` (run from its folder, its output in ``log``), stopped with the code
    server and the run workers it started afterwards."""
    command = [str(Path(sys.executable).with_name("dagster-daemon")), "run", "-w", str(workspace)]
    with log.open("w") as out:
        # A session of its own: stopping it stops the code server it started, and nothing else.
        daemon = subprocess.Popen(
            command, env=dict(environ), cwd=workspace.parent, stdout=out, stderr=out, start_new_session=True
        )
        try:
            yield daemon
        finally:
            stop_group(daemon)
            # Run workers still going outlive the daemon, their folder about to be deleted; one whose import failed then
            # was seen spinning for half an hour inside DuckDB, opening the store again to mark its pairs failed.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGKILL)


def _wait_for_queue_daemon(instance: dg.DagsterInstance, daemon: subprocess.Popen) -> None:
    deadline = time.monotonic() + _STALL_SECONDS
    while "QUEUED_RUN_COORDINATOR" not in instance.get_daemon_heartbeats():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("dagster-daemon did not start its run queue; see daemon.log")
        time.sleep(0.5)


def _submit(instance: dg.DagsterInstance, workspace: Path, store: Store, runs: list[ImportRun]) -> list[str]:
    """Reserve each run's pairs and queue it as the import sensor does: same job, config and tags."""
    with WorkspaceProcessContext(instance, WorkspaceFileTarget([str(workspace)])) as process:
        context = process.create_request_context()
        (location,) = context.code_locations
        remote_job = location.get_repository("__repository__").get_full_job(import_places.name)
        run_ids = []
        for run in runs:
            stamp = store.force_request(run.pairs, datetime.now(UTC))
            created = instance.create_run_for_job(
                import_places,
                run_config=import_run_config(run).to_config_dict(),
                tags={**import_places.tags, tags.IMPORT_KEY: run.key, tags.STAMP: tags.stamp_tag(stamp)},
                remote_job_origin=remote_job.get_remote_origin(),
                job_code_origin=remote_job.get_python_origin(),
            )
            instance.submit_run(created.run_id, context)
            run_ids.append(created.run_id)
    return run_ids


def _wait_for_runs(instance: dg.DagsterInstance, run_ids: list[str], daemon: subprocess.Popen) -> None:
    done, last_progress = 0, time.monotonic()
    while done < len(run_ids):
        if daemon.poll() is not None:
            raise RuntimeError("dagster-daemon exited while runs were queued; see daemon.log")
        finished = instance.get_runs_count(dg.RunsFilter(run_ids=run_ids, statuses=list(_FINISHED)))
        if finished > done:
            done, last_progress = finished, time.monotonic()
        elif time.monotonic() - last_progress > _STALL_SECONDS:
            raise RuntimeError(f"no import run finished for {_STALL_SECONDS} s ({done} of {len(run_ids)} done)")
        time.sleep(0.5)
    failed = instance.get_runs(
        dg.RunsFilter(run_ids=run_ids, statuses=[dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED])
    )
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(run_ids)} import runs did not succeed, e.g. {failed[0].run_id}")


def _timeline(instance: dg.DagsterInstance, run_id: str) -> dict[dg.DagsterEventType | str, float]:
    first: dict[dg.DagsterEventType | str, float] = {}
    kinds = {mark for mark in TIMELINE if isinstance(mark, dg.DagsterEventType)} | {dg.DagsterEventType.ENGINE_EVENT}
    for record in instance.get_records_for_run(run_id, of_type=kinds, limit=None).records:
        entry = record.event_log_entry
        if entry.dagster_event_type != dg.DagsterEventType.ENGINE_EVENT:
            first.setdefault(entry.dagster_event_type, entry.timestamp)
        elif entry.dagster_event and (entry.dagster_event.message or "").startswith(_PROCESS_STARTED_MESSAGE):
            first.setdefault(PROCESS_STARTED, entry.timestamp)
    return first


def _mark_name(mark: dg.DagsterEventType | str) -> str:
    return mark.value.lower() if isinstance(mark, dg.DagsterEventType) else mark


def _slot_idle(spans: list[tuple[float, float]], slots: int) -> list[float]:
    """How long a freed slot stood empty: each start after the first ``slots`` takes the slot of the earliest end
    not yet taken, and waited from that end to its start (zero if it started first)."""
    starts = sorted(start for start, _ in spans)[slots:]
    ends = sorted(end for _, end in spans)
    return [max(0.0, start - end) for start, end in zip(starts, ends, strict=False)]


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    # +1 when a run leaves the queue (the daemon records it as starting), -1 when it ends; at the same instant
    # an end sorts first.
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in edges:
        running += step
        most = max(most, running)
    return most


def _median(values: list[float]) -> float:
    return round(statistics.median(values), 3)


@contextlib.contextmanager
def _instance_home(kind: str, launcher: str, folder: Path, postgres: str) -> Iterator[tuple[Path, dict[str, str]]]:
    """A fresh DAGSTER_HOME holding the ``kind`` instance's dagster.yaml with ``launcher``'s run launcher, and the
    environment its storage reads."""
    home = folder / "dagster_home"
    home.mkdir()
    settings = yaml.safe_load(INSTANCES[kind].read_text())
    # No Kubernetes here: the production instance gets the launcher a single host would use.
    settings.pop("run_launcher", None)
    if launcher == "project":
        settings["run_launcher"] = yaml.safe_load(INSTANCES["embedded"].read_text())["run_launcher"]
    (home / "dagster.yaml").write_text(yaml.safe_dump(settings))
    if kind == "embedded":
        yield home, {}
        return
    with scratch_database("postgres", postgres, folder) as url:
        parts = urlsplit(url)
        yield (
            home,
            {
                "DAGSTER_PG_HOST": parts.hostname or "127.0.0.1",
                "DAGSTER_PG_PORT": str(parts.port or 5432),
                "DAGSTER_PG_USERNAME": parts.username or "postgres",
                "DAGSTER_PG_PASSWORD": parts.password or "",
                "DAGSTER_PG_DB": parts.path.lstrip("/"),
            },
        )


def measure_daemon(
    release_root: str,
    runs: int,
    instance_kind: str = "embedded",
    postgres: str = DEFAULT_POSTGRES,
    launcher: str = "project",
) -> dict:
    """Queue ``runs`` block import runs on a fresh ``instance_kind`` instance served by a real ``dagster-daemon
    run`` launching each run with ``launcher`` (one of LAUNCHERS), wait for all, and report block runs an hour, the
    median run, queue wait and launch, each step of a run's timeline, how long a freed slot stood empty, and the
    most import runs seen at once (the project's limit is two)."""
    with tempfile.TemporaryDirectory(prefix="nakodo-daemon-") as tmp:
        folder = Path(tmp)
        with _instance_home(instance_kind, launcher, folder, postgres) as (home, storage_environ):
            environ = {
                **os.environ,
                **storage_environ,
                "DAGSTER_HOME": str(home),
                "NAKODO_DATABASE": str(folder / "store.duckdb"),
                "NAKODO_OVERTURE_ROOT": release_root,
                "NAKODO_OVERTURE_RELEASE": "",
                # Empty: the release index beside the store, in this bench's own folder.
                "NAKODO_OVERTURE_INDEX": "",
            }
            store = open_store(environ["NAKODO_DATABASE"])
            store.migrate()
            workspace = _workspace(folder)
            work = block_runs(runs)
            log = folder / "daemon.log"
            with (
                _environment(storage_environ),
                dg.DagsterInstance.from_config(str(home)) as instance,
                running_daemon(workspace, environ, log) as daemon,
            ):
                try:
                    _wait_for_queue_daemon(instance, daemon)
                    run_ids = _submit(instance, workspace, store, work)
                    _wait_for_runs(instance, run_ids, daemon)
                except RuntimeError as error:
                    raise RuntimeError(f"{error}\n{log.read_text()[-3000:]}") from error
                timelines = [_timeline(instance, run_id) for run_id in run_ids]
        loaded = sum(
            row.release != "requested" for row in store.import_rows({a for r in work for a in r.areas}, CATEGORIES)
        )
    starting, success = dg.DagsterEventType.RUN_STARTING, dg.DagsterEventType.RUN_SUCCESS
    enqueued = min(t[dg.DagsterEventType.RUN_ENQUEUED] for t in timelines)
    ended = max(t[success] for t in timelines)
    steps = {
        f"{_mark_name(earlier)}_to_{_mark_name(later)}": _median([t[later] - t[earlier] for t in timelines])
        for earlier, later in itertools.pairwise(TIMELINE)
    }
    spans = [(t[starting], t[success]) for t in timelines]
    run_seconds = _median([end - start for start, end in spans])
    idle = _median(_slot_idle(spans, IMPORT_SLOTS))
    return {
        "instance": instance_kind,
        "launcher": launcher,
        "runs": len(work),
        "pairs_per_run": len(work[0].pairs),
        "pairs_loaded": loaded,
        "seconds": round(ended - enqueued, 1),
        "block_runs_per_hour": round(len(work) * 3600 / (ended - enqueued)),
        "median_run_seconds": run_seconds,
        "median_slot_idle_seconds": idle,
        # What two slots would do if every run and every gap were the median one.
        "block_runs_per_hour_at_the_medians": round(IMPORT_SLOTS * 3600 / (run_seconds + idle)),
        "median_queue_to_start_seconds": _median(
            [t[dg.DagsterEventType.RUN_START] - t[dg.DagsterEventType.RUN_ENQUEUED] for t in timelines]
        ),
        "median_timeline_seconds": steps,
        "max_concurrent_import_runs": _most_at_once(spans),
        "load_average": os.getloadavg()[0],
    }


@contextlib.contextmanager
def _environment(values: Mapping[str, str]) -> Iterator[None]:
    # This process opens the instance too: its storage settings are read from the environment.
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.daemon", description=__doc__)
    parser.add_argument("--runs", type=int, default=40, help="block import runs to queue (default 40)")
    parser.add_argument("--release-root", help="a folder of releases (default: a sample release written here)")
    parser.add_argument("--instance", choices=sorted(INSTANCES), default="embedded", help="Dagster instance")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="project", help="run launcher (default: project)")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES, help="server for the postgres instance's database")
    args = parser.parse_args(argv)
    with contextlib.ExitStack() as stack:
        root = args.release_root or stack.enter_context(tempfile.TemporaryDirectory(prefix="nakodo-release-"))
        if not args.release_root:
            write_sample_release(root, rows=200_000, seed=7, progress=False)
        print(json.dumps(measure_daemon(root, args.runs, args.instance, args.postgres, args.launcher), indent=2))


if __name__ == "__main__":
    main()
