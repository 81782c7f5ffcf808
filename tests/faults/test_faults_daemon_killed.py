"""The daemon's whole process group killed while two imports run (a node lost, an OOM kill, a pod evicted), then
started again as a service manager would: the real `dagster-daemon` with the project's dagster.yaml. The killed
runs are run again and land; no pair is marked failed for a fault of the machinery; no pool slot stays with a run
that ended; the fleet imports again within minutes."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from overture_helpers import CURRENT as RELEASE

from bench.daemon import running_daemon
from bench.faults import FINISHED, daemon_home, import_runs, run_pairs, slots_held_by_ended_runs
from nakodo_dagster import tags
from nakodo_dagster.dagster_internals import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG
from nakodo_dagster.imports.events import IMPORT_POOL
from nakodo_dagster.overture.index import index_path
from nakodo_dagster.placement import Cutoffs, PointLocation, Targeting
from nakodo_dagster.store import open_store

# Its wait for the runs to land again alone is 240 s.
pytestmark = [pytest.mark.faults, pytest.mark.slow, pytest.mark.timeout(600)]

# Two campaigns far apart: two import runs, one per block, both running at once.
CAMPAIGNS = {
    "Leeds": Targeting((PointLocation(53.75, -1.75, 2),), ("cafe",)),
    "Paris": Targeting((PointLocation(48.85, 2.35, 2),), ("cafe",)),
}
# What "within minutes" allows after the restart: the killed runs are found dead at run monitoring's first look,
# their slots freed 75 s after they ended (dagster.yaml), and their retries (or the import sensor's asking again, at
# its next tick 30 s apart, for a run Dagster's retry daemon passed by) take seconds.
RECOVERY_SECONDS = 240


def test_imports_killed_with_the_daemon_are_run_again_and_land(tmp_path, release_root):
    workspace, environ = daemon_home(tmp_path, release_root)
    home = environ["DAGSTER_HOME"]
    # The release's index is a pipe nobody writes: an import blocks reading it until its worker is killed.
    index = index_path(release_root, RELEASE, tmp_path / "overture_index")
    index.parent.mkdir(parents=True)
    os.mkfifo(index)
    store = open_store(environ["NAKODO_DATABASE"])
    store.migrate()
    for name, targeting in CAMPAIGNS.items():
        store.add_campaign(name, targeting)

    # The instance's storage is made before the daemon and its code server start (see test_fair_share_daemon).
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.get_runs_count()

        def wait_for(
            what: str, seconds: float, ready: Callable[[], object], log: Path, state: Callable[[], str] = str
        ) -> object:
            deadline = time.monotonic() + seconds
            while not (found := ready()):
                assert time.monotonic() < deadline, f"waited {seconds} s for {what}: {state()}\n{log.read_text()}"
                time.sleep(0.5)
            return found

        def slot_holders() -> set[str]:
            return instance.event_log_storage.get_concurrency_info(IMPORT_POOL).active_run_ids

        def importing() -> list[dg.DagsterRun]:
            """The import runs whose step has its slot and runs (blocked on the index's pipe)."""
            return [
                run
                for run in import_runs(instance, [dg.DagsterRunStatus.STARTED])
                if instance.get_records_for_run(run.run_id, of_type=dg.DagsterEventType.STEP_START, limit=1).records
            ]

        first_log = tmp_path / "daemon.log"
        with running_daemon(workspace, environ, first_log) as daemon:
            # Every slot holder is one of the two steps, not always both: on SQLite storage, two steps claiming at
            # the same moment can both write their run into the same slot (its claim's row lock is PostgreSQL's).
            killed = wait_for(
                "two import runs in their step, holding the import slots",
                240,
                lambda: (
                    (running := importing())
                    and len(running) == 2
                    and (holders := slot_holders())
                    and holders <= {r.run_id for r in running}
                    and running
                ),
                first_log,
                lambda: (
                    f"import runs {[(r.run_id[:8], r.status.value) for r in import_runs(instance)]}; "
                    f"slot holders {sorted(holder[:8] for holder in slot_holders())}"
                ),
            )
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
        pairs = {pair for run in killed for pair in run_pairs(run)}
        # The pipe goes: the retries build the index and read the release.
        index.unlink()

        restart_log = tmp_path / "daemon_restarted.log"
        with running_daemon(workspace, environ, restart_log):
            restarted = time.monotonic()

            def landed() -> bool:
                rows = store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})
                cutoffs = Cutoffs.at(datetime.now(UTC))
                return len(rows) == len(pairs) and {cutoffs.row_state(row) for row in rows} == {"fresh"}

            def runs_and_marks() -> str:
                runs = [(r.run_id[:8], r.status.value, r.tags.get(WILL_RETRY_TAG)) for r in import_runs(instance)]
                rows = store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})
                return f"import runs {runs}; marks {[(r.area, r.category, r.release, r.failure) for r in rows]}"

            wait_for("the killed imports to land", RECOVERY_SECONDS, landed, restart_log, runs_and_marks)
            recovered = time.monotonic() - restarted
            wait_for(
                "every import run to end",
                60,
                lambda: all(r.status in FINISHED for r in import_runs(instance)),
                restart_log,
            )

        retried = 0
        for run in killed:
            run = instance.get_run_by_id(run.run_id)
            assert run.status == dg.DagsterRunStatus.FAILURE, "run monitoring found its worker gone"
            assert run.tags.get(WILL_RETRY_TAG) == "true"
            if AUTO_RETRY_RUN_ID_TAG not in run.tags:
                # Dagster's retry daemon read the failure before the run's status said failed, and passed it by
                # (tests/test_dagster_internals.py): the import sensor asked for its pairs again at its next tick.
                continue
            retry = instance.get_run_by_id(run.tags[AUTO_RETRY_RUN_ID_TAG])
            assert retry.status == dg.DagsterRunStatus.SUCCESS
            assert retry.tags[tags.STAMP] == run.tags[tags.STAMP], "the retry held the killed run's marks"
            retried += 1
        rows = store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})
        assert not [row for row in rows if row.failure], "a fault of the machinery marked pairs failed"
        assert not slots_held_by_ended_runs(instance), "a pool slot is held by a run that ended"
        print(
            f"imports landed {recovered:.0f} s after the daemon was started again; "
            f"{retried} of {len(killed)} killed runs retried by Dagster, the rest asked for again"
        )
