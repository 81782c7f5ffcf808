"""Fair share through the real daemon: the project's dagster.yaml (queued run coordinator, two imports at a time),
its sensors ticking, the default run launcher. A starter account's first block, once the import sensor asks for
it, starts within the next four import runs started, while the default account's backlog waits."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml

from bench.daemon import running_daemon
from nakodo_dagster import tags
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.store import open_store

pytestmark = [pytest.mark.long, pytest.mark.slow]

PROJECT = Path(__file__).parents[2]
# Two campaigns of forty 25 km circles over Europe, each circle in a block of its own: a backlog of 80 block runs,
# 78 of them behind the campaigns' first blocks. Block runs take about 1.3 s of a slot: a smaller backlog is gone
# before the sensor's next tick asks for the small account's block.
BACKLOG = [
    Targeting(
        tuple(PointLocation(40.9 + 2 * row, -5.1 + 2 * column, 25) for row in rows for column in range(10)), ("cafe",)
    )
    for rows in (range(4), range(4, 8))
]
SMALL = Targeting((PointLocation(53.75, -1.75, 2),), ("pub",))
SMALL_PAIR = ("cell:53.5,-2", "pub")
DEADLINE_SECONDS = 360


def _import_runs(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    return list(instance.get_runs(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND})))


def _holds_small_pair(run: dg.DagsterRun) -> bool:
    return SMALL_PAIR in {tuple(pair) for pair in import_payload(run.run_config)["pairs"]}


def _started_at(instance: dg.DagsterInstance, run: dg.DagsterRun) -> float | None:
    record = instance.get_run_record_by_id(run.run_id)
    return record.start_time if record else None


def test_a_new_accounts_first_block_starts_within_the_next_four_import_runs(tmp_path, release_root):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "nakodo_dagster" / "data" / "dagster.yaml", home / "dagster.yaml")
    workspace = tmp_path / "workspace.yaml"
    location = {"module_name": "nakodo_dagster.definitions", "working_directory": str(tmp_path)}
    workspace.write_text(yaml.safe_dump({"load_from": [{"python_module": location}]}))
    environ = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("NAKODO_", "DAGSTER_"))},
        "DAGSTER_HOME": str(home),
        "NAKODO_DATABASE": str(tmp_path / "store.duckdb"),
        "NAKODO_OVERTURE_ROOT": release_root,
    }
    store = open_store(environ["NAKODO_DATABASE"])
    store.migrate()
    for number, targeting in enumerate(BACKLOG):
        store.add_campaign(f"backlog {number}", targeting)
    small = store.add_account("small", "starter")

    # The instance's storage is made here, before the daemon and its code server start: processes creating the same
    # SQLite storage at once can stamp its schema twice, and neither then loads it.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs_count()
        with running_daemon(workspace, environ, tmp_path / "daemon.log") as daemon:
            deadline = time.monotonic() + DEADLINE_SECONDS

            def wait_for(what: str, ready):
                while not (found := ready()):
                    assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
                    assert time.monotonic() < deadline, f"waited {DEADLINE_SECONDS} s for {what}"
                    time.sleep(0.5)
                return found

            # The backlog is asked for and under way.
            wait_for(
                "the backlog's runs to start",
                lambda: sum(_started_at(instance, r) is not None for r in _import_runs(instance)) >= 2,
            )
            store.add_campaign("Leeds pubs", SMALL, account_id=small)
            asked = wait_for(
                "the import sensor to ask for the small account's block",
                lambda: [r for r in _import_runs(instance) if _holds_small_pair(r)],
            )
            asked_at = instance.get_run_record_by_id(asked[0].run_id).create_timestamp.timestamp()
            waiting_then = [
                r for r in _import_runs(instance) if r.status == dg.DagsterRunStatus.QUEUED and not _holds_small_pair(r)
            ]
            assert len(waiting_then) >= 4, "a backlog is still waiting when the small account's run is asked for"
            started = wait_for("the small account's run to start", lambda: _started_at(instance, asked[0]))

            # Import runs that started after it was asked for, up to and including it.
            starts = [(_started_at(instance, r), r.run_id) for r in _import_runs(instance)]
            after = sorted(start for start in starts if start[0] is not None and asked_at <= start[0] <= started)
            assert len(after) <= 4, after
