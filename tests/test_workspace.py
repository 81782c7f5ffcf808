"""The project as a Dagster engineer starts it: workspace.yaml names the code location, Dagster's own commands work
from a plain shell (no NAKODO_* variables), and stopping `make run` stops everything it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import dagster as dg
import pytest
import yaml

from nakodo_dagster import tags
from nakodo_dagster.sensors.failure_sensor import held_marks
from nakodo_dagster.store import open_store

PROJECT = Path(__file__).parents[1]
DAGSTER = Path(sys.executable).with_name("dagster")
IN_FLIGHT = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]
# An import run this young at the stop is still reading when the stop reaches it.
JUST_BEGUN_SECONDS = 1.0


def plain_shell(home: Path) -> dict[str, str]:
    """The environment of a shell with the virtualenv on its PATH and nothing of the project's set."""
    keep = {name: value for name, value in os.environ.items() if not name.startswith(("NAKODO_", "DAGSTER_"))}
    return {**keep, "DAGSTER_HOME": str(home)}


def test_the_workspace_file_names_the_code_location_nakodo_dagster():
    workspace = yaml.safe_load((PROJECT / "workspace.yaml").read_text())
    assert workspace["load_from"] == [
        {
            "python_module": {
                "module_name": "nakodo_dagster.definitions",
                "location_name": "nakodo_dagster",
                "working_directory": ".",
            }
        }
    ]


def dagster(folder: Path, *args: str) -> subprocess.CompletedProcess:
    """Dagster's own command line from a plain shell in ``folder``; it must succeed."""
    done = subprocess.run(
        [str(DAGSTER), *args], cwd=folder, env=plain_shell(folder), capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr
    return done


def test_dagster_validates_the_location_the_workspace_file_names(tmp_path):
    done = dagster(tmp_path, "definitions", "validate", "-w", str(PROJECT / "workspace.yaml"))
    assert "Validation successful for code location nakodo_dagster." in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("sensor", "says"),
    [
        ("import_sensor", "0 import runs not asked for: NAKODO_OVERTURE_ROOT isn't set."),
        ("search_sensor", "No active campaign."),
    ],
)
def test_a_sensor_ticks_from_a_plain_shell_on_the_embedded_default(tmp_path, sensor, says):
    done = dagster(tmp_path, "sensor", "preview", "-m", "nakodo_dagster.definitions", sensor)
    assert says in done.stdout
    # The embedded default: a DuckDB store in the working folder's data/, as `make run` has it.
    assert (tmp_path / "data" / "nakodo.duckdb").exists()


def _descendants_alive(session: int) -> list[str]:
    """Processes still alive in the session `make run` was started in."""
    listed = subprocess.run(["ps", "-eo", "sid=,pid=,args="], capture_output=True, text=True, check=True).stdout
    return [line.strip() for line in listed.splitlines() if line.split(None, 1)[0] == str(session)]


def _runs_in_flight(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return instance.get_runs(dg.RunsFilter(statuses=IN_FLIGHT))


@pytest.mark.long
@pytest.mark.slow
def test_stopping_make_run_started_from_a_script_stops_everything_and_cancels_its_runs(tmp_path):
    """As a service manager or a script without job control starts it (SIGINT inherited as ignored, a session of
    its own), a SIGTERM to make stops every process within 30 s; runs in flight end cancelled, their marks freed."""
    port = "3987"
    data = tmp_path / "data"
    environ = {
        **plain_shell(data / "dagster_home"),
        "NAKODO_DATABASE": str(data / "nakodo.duckdb"),
        "NAKODO_OVERTURE_ROOT": str(data / "overture"),
    }
    log = (tmp_path / "make_run.log").open("w")
    make = subprocess.Popen(
        ["bash", "-c", f"trap '' INT; exec make --no-print-directory run DATA={data} PORT={port}"],
        cwd=PROJECT,
        env=environ,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while True:
            assert make.poll() is None, (tmp_path / "make_run.log").read_text()
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "the UI did not answer within 3 minutes"
            time.sleep(1)
        # The demo campaigns' first import runs start at the sensor's first tick: stop while they are in flight.
        with dg.DagsterInstance.from_config(str(data / "dagster_home")) as instance:
            # Not while a search's run is inside its step: dagster dev's stop reaches that worker's process group
            # before the launcher's cancel does, and the run ends failed instead of cancelled (a known race; the
            # search holds no marks, and its campaigns are searched again at the next start).
            # Nor while the imports are about to end: a demo import reads for seconds, and one in its last second
            # could succeed before the stop reaches it, leaving nothing cancelled to check.
            deadline = time.monotonic() + 120
            while True:
                records = instance.get_run_records(dg.RunsFilter(statuses=IN_FLIGHT))
                in_flight = [record.dagster_run for record in records]
                kinds = {run.tags.get(tags.KIND) for run in in_flight}
                if kinds == {tags.IMPORT_KIND} and any(
                    record.start_time is None or time.time() - record.start_time < JUST_BEGUN_SECONDS
                    for record in records
                ):
                    break
                assert time.monotonic() < deadline, "no import run just begun without a search within 2 minutes"
                time.sleep(0.1)
            make.send_signal(signal.SIGTERM)
            stopped_at = time.monotonic()
            make.wait(timeout=60)
            while _descendants_alive(make.pid) and time.monotonic() < stopped_at + 30:
                time.sleep(1)
            assert _descendants_alive(make.pid) == []

            assert _runs_in_flight(instance) == []
            ended = {run.run_id: instance.get_run_by_id(run.run_id) for run in in_flight}
            # A run may finish between the look and the signal; none is left running or failed by the stop.
            assert {run.status for run in ended.values()} <= {dg.DagsterRunStatus.CANCELED, dg.DagsterRunStatus.SUCCESS}
            cancelled = [run for run in ended.values() if run.status == dg.DagsterRunStatus.CANCELED]
            assert cancelled, [run.status for run in ended.values()]
        # A tick stamps all its runs alike: the queued ones keep theirs, a cancelled import's own pairs are free (a
        # search run in flight is cancelled too, and holds no mark).
        store = open_store(environ["NAKODO_DATABASE"])
        for run in (run for run in cancelled if run.tags.get(tags.KIND) == tags.IMPORT_KIND):
            marks = held_marks(run, store)
            assert marks is not None, run.tags
            assert set(marks.pairs).isdisjoint(store.marks_stamped(marks.stamp)), run.run_id
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
        leftover = _descendants_alive(make.pid)
        if leftover:
            os.killpg(make.pid, signal.SIGKILL)
        log.close()
    printed = (tmp_path / "make_run.log").read_text()
    assert f"Dagster UI on http://127.0.0.1:{port}" in printed
    assert " - DEBUG - " not in printed, "the runs' event stream stays in the UI"
    assert "SupersessionWarning" not in printed
