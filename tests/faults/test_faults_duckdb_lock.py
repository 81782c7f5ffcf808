"""Another process holds the DuckDB store file in a write transaction: the store waits, or says it gave up."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import duckdb
import pytest
from fault_helpers import changed_places, stored_places
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.assets.coverage import places_coverage_sensor
from nakodo_dagster.imports.failure import Overrun
from nakodo_dagster.imports.run import import_or_release_marks
from nakodo_dagster.overture.reader import read_places
from nakodo_dagster.placement import REQUESTED, PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import search_sensor
from nakodo_dagster.store import DuckDBStore, StoreLocked, open_store

pytestmark = pytest.mark.faults

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe", "pub"))


@pytest.fixture
def loaded(duckdb_url, release_root, tmp_path):
    """A store holding one import of the Leeds pairs, and that import's run and places."""
    store = open_store(duckdb_url)
    store.migrate()
    areas = areas_for(LEEDS)
    [run] = import_runs({key: list(LEEDS.categories) for key in areas}, areas)
    places = read_places(run, release_root, RELEASE, index_dir=tmp_path / "index").table
    store.write_import(run, RELEASE, places, datetime.now(UTC))
    return store, run, places


def _campaign_names(path: str) -> list[str]:
    # Opened afresh, as after a restart: a damaged file would not open or not read.
    with duckdb.connect(path, read_only=True) as connection:
        return [row[0] for row in connection.execute("SELECT name FROM campaigns ORDER BY id").fetchall()]


def test_the_writer_waits_for_the_holder_and_both_writes_land(loaded, duckdb_url, workers):
    store, run, _ = loaded
    before = stored_places(store, list(run.pairs))
    holder = workers.start("hold", {"path": duckdb_url})
    workers.go(holder)
    assert holder.stdout.readline().strip() == "holding"
    written: list[object] = []
    writer = threading.Thread(target=lambda: written.append(store.add_campaign("Leeds", LEEDS)))
    writer.start()
    time.sleep(0.5)
    assert writer.is_alive(), "the writer waits on the file lock"

    holder.stdin.write("commit\n")
    holder.stdin.flush()
    writer.join(timeout=30)

    assert holder.wait(timeout=30) == 0
    assert written and isinstance(written[0], int)
    assert _campaign_names(duckdb_url) == ["held", "Leeds"]
    assert not changed_places(before, stored_places(store, list(run.pairs)))


def test_a_holder_that_outlasts_the_timeout_is_a_clear_error_and_its_death_harms_nothing(loaded, duckdb_url, workers):
    store, run, places = loaded
    before = stored_places(store, list(run.pairs))
    holder = workers.start("hold", {"path": duckdb_url})
    workers.go(holder)
    assert holder.stdout.readline().strip() == "holding"
    impatient = open_store(duckdb_url, lock_timeout=0.5)

    with pytest.raises(StoreLocked, match=rf"{Path(duckdb_url).name} stayed locked for 0.5 s"):
        impatient.write_import(run, "2026-12-16.0", places, datetime.now(UTC))
    # The holder dies with its transaction open.
    holder.send_signal(signal.SIGKILL)
    holder.wait(timeout=30)

    assert _campaign_names(duckdb_url) == [], "the dead holder's uncommitted campaign is not there"
    assert not changed_places(before, stored_places(store, list(run.pairs))), "the refused import wrote nothing"
    assert store.add_campaign("Leeds", LEEDS) > 0, "and the file takes writes again"


def _wait_until_it_waits_on_the_store(thread: threading.Thread) -> None:
    """Until ``thread`` is inside the DuckDB store's wait for the file, rather than for a fixed pause that assumes
    how long the read before it takes."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        frame = sys._current_frames().get(thread.ident)
        while frame is not None:
            if frame.f_code is DuckDBStore._transact.__code__:
                return
            frame = frame.f_back
        time.sleep(0.05)
    raise AssertionError("the import never waited on the store file")


@pytest.mark.parametrize("past_max_runtime", [True, False], ids=["past its max runtime", "cancelled before it"])
def test_an_import_stopped_past_its_max_runtime_fails_its_pairs_and_a_cancelled_one_frees_them(
    loaded, duckdb_url, release_root, workers, past_max_runtime
):
    store, run, _ = loaded
    stamp = store.force_request(run.pairs, datetime.now(UTC))
    # The import reads, then waits on the file to write: it is stopped there, as run monitoring stops a stuck run.
    holder = workers.start("hold", {"path": duckdb_url})
    workers.go(holder)
    assert holder.stdout.readline().strip() == "holding"
    now = datetime.now(UTC)
    overrun = Overrun(now - timedelta(seconds=1) if past_max_runtime else now + timedelta(hours=1), "stopped as stuck")

    importer = threading.current_thread()

    def stop() -> None:
        _wait_until_it_waits_on_the_store(importer)
        # Dagster turns the SIGTERM a run's worker gets into this interrupt.
        os.kill(os.getpid(), signal.SIGINT)
        holder.stdin.write("commit\n")
        holder.stdin.flush()

    stopper = threading.Thread(target=stop)
    stopper.start()
    with pytest.raises(KeyboardInterrupt):
        import_or_release_marks(run, store, OvertureResource(root=release_root), stamp, RELEASE, overrun)
    stopper.join()

    pairs = store.import_rows({area for area, _ in run.pairs}, {category for _, category in run.pairs})
    marked = {(r.area, r.category): r.failure for r in pairs if r.release == REQUESTED and r.imported_at >= stamp}
    if past_max_runtime:
        # Failed: not asked for again for a week, where asking at once would hold an import slot as long again.
        assert marked == dict.fromkeys(run.pairs, "stopped as stuck")
    else:
        assert marked == {}, "a cancelled import's marks are taken back: the next tick asks again"


def test_a_sensor_tick_opens_the_file_once_and_lets_it_go_when_it_ends(
    loaded, duckdb_url, release_root, workers, monkeypatch
):
    store, _, _ = loaded
    store.add_campaign("Leeds", LEEDS)
    opened = []
    connect = DuckDBStore._connect
    monkeypatch.setattr(DuckDBStore, "_connect", lambda self, path: opened.append(path) or connect(self, path))
    resources = {"store": StoreResource(database=duckdb_url), "overture": OvertureResource(root=release_root)}
    with dg.instance_for_test() as instance:
        for sensor in (import_sensor, search_sensor, places_coverage_sensor):
            opened.clear()
            sensor(dg.build_sensor_context(instance=instance, resources=resources))
            assert len(opened) == 1, f"{sensor.name} opened the file once for its whole tick"
            assert not Path(f"{duckdb_url}.wal").exists(), "and checkpointed it once, on closing"
            holder = workers.start("hold", {"path": duckdb_url})
            workers.go(holder)
            assert holder.stdout.readline().strip() == "holding", "another process has the file as soon as it ends"
            holder.stdin.write("commit\n")
            holder.stdin.flush()
            assert holder.wait(timeout=30) == 0
