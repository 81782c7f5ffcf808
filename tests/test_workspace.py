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

import pytest
import yaml

PROJECT = Path(__file__).parents[1]
DAGSTER = Path(sys.executable).with_name("dagster")


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


@pytest.mark.slow
def test_stopping_make_run_stops_everything_it_started(tmp_path):
    port = "3987"
    data = tmp_path / "data"
    environ = {
        **plain_shell(data / "dagster_home"),
        "NAKODO_DATABASE": str(data / "nakodo.duckdb"),
        "NAKODO_OVERTURE_ROOT": str(data / "overture"),
    }
    log = (tmp_path / "make_run.log").open("w")
    make = subprocess.Popen(
        ["make", "--no-print-directory", "run", f"DATA={data}", f"PORT={port}"],
        cwd=PROJECT,
        env=environ,
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
        # Let the sensors tick and the first import runs start, so that there are runs to stop too.
        time.sleep(20)

        make.send_signal(signal.SIGTERM)
        make.wait(timeout=60)
        deadline = time.monotonic() + 30
        while _descendants_alive(make.pid) and time.monotonic() < deadline:
            time.sleep(1)
        assert _descendants_alive(make.pid) == []
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
