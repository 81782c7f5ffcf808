"""``nakodo dagster-home``: Dagster's storage created once, so that the processes started next on a new DAGSTER_HOME
(a webserver and a daemon side by side, each with its code server) never create it at the same moment."""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sqlite3
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import dagster as dg
import pytest
from click.testing import CliRunner

from nakodo_dagster.cli import main
from nakodo_dagster.cli.shared import PREPARED_FOR

# Fresh instances, each prepared, then opened by two processes released at the same instant. Unprepared, every one
# of 11 such attempts left the storage stamped twice or failed to open it: ten leave a race no room to hide.
ATTEMPTS = 10
# The SQLite files of Dagster's storage that each record their schema's version.
VERSIONED = ("history/runs.db", "history/runs/index.db", "schedules/schedules.db")


def prepare(home: Path, monkeypatch) -> str:
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    result = CliRunner().invoke(main, ["dagster-home"])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result.output


def open_when_released(homes, released, outcomes) -> None:
    """A process that opens each instance it is handed at the moment the other one does."""
    import dagster as dg

    while (home := homes.get()) is not None:
        os.environ["DAGSTER_HOME"] = home
        released.wait(timeout=120)
        try:
            with dg.DagsterInstance.get() as instance:
                instance.get_runs_count()
        except Exception as error:  # what a racing open raises is Dagster's and SQLAlchemy's business
            outcomes.put(f"{type(error).__name__}: {error}")
        else:
            outcomes.put(None)


@pytest.fixture
def two_processes() -> Iterator[tuple[multiprocessing.Queue, multiprocessing.Queue]]:
    """(homes, outcomes): each home put twice is opened by both processes at once; one outcome each."""
    context = multiprocessing.get_context("spawn")
    homes, outcomes, released = context.Queue(), context.Queue(), context.Barrier(2)
    processes = [context.Process(target=open_when_released, args=(homes, released, outcomes)) for _ in range(2)]
    for process in processes:
        process.start()
    try:
        yield homes, outcomes
    finally:
        for _ in processes:
            homes.put(None)
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()


def schema_versions(home: Path) -> dict[str, list[str]]:
    versions = {}
    for name in VERSIONED:
        with sqlite3.connect(home / name) as connection:
            versions[name] = [row[0] for row in connection.execute("SELECT version_num FROM alembic_version")]
    return versions


def test_instances_prepared_once_are_opened_by_two_processes_at_once_without_a_race(
    tmp_path, monkeypatch, two_processes
):
    homes, outcomes = two_processes
    embedded = files("nakodo_dagster").joinpath("data", "dagster.yaml")
    for attempt in range(ATTEMPTS):
        home = tmp_path / f"home_{attempt}"
        home.mkdir()
        # As `make run` makes DAGSTER_HOME: the embedded default's instance, nothing created yet.
        shutil.copyfile(str(embedded), home / "dagster.yaml")
        assert f"Dagster instance ready: {home}" in prepare(home, monkeypatch)
        homes.put(str(home))
        homes.put(str(home))
        assert [outcomes.get(timeout=180) for _ in range(2)] == [None, None], f"attempt {attempt}"
        # One schema version recorded per file: two creations at once would have stamped it twice.
        versions = schema_versions(home)
        assert all(len(stamped) == 1 for stamped in versions.values()), versions
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert instance.get_runs_count() == 0


def test_a_plain_folder_gets_the_embedded_instance_and_a_dagster_upgrade_migrates_it_once(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    runner = CliRunner()
    first = runner.invoke(main, ["dagster-home"])
    home = tmp_path / "data" / "dagster_home"
    assert first.exit_code == 0, first.output
    assert first.output.splitlines()[-1] == f"Dagster instance ready: {home}"
    embedded = files("nakodo_dagster").joinpath("data", "dagster.yaml").read_text("utf-8")
    assert (home / "dagster.yaml").read_text("utf-8") == embedded
    assert all(len(stamped) == 1 for stamped in schema_versions(home).values())
    assert (home / PREPARED_FOR).read_text("utf-8") == dg.__version__

    # Prepared for this Dagster: opened only, Dagster's upgrade (which reads every run's events) not run again.
    assert runner.invoke(main, ["dagster-home"]).output == f"Dagster instance ready: {home}\n"
    # Prepared by an older Dagster: upgraded once, by Dagster's own migration.
    (home / PREPARED_FOR).write_text("1.12.0", "utf-8")
    upgraded = runner.invoke(main, ["dagster-home"])
    assert "Updating event log storage" in upgraded.output
    assert (home / PREPARED_FOR).read_text("utf-8") == dg.__version__


def test_a_dagster_home_that_is_not_a_folder_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "missing"))
    refused = CliRunner().invoke(main, ["dagster-home"])
    assert refused.exit_code == 2
    assert "is not a folder: create it, or unset it to use data/dagster_home" in refused.output
    assert not (tmp_path / "missing").exists()
