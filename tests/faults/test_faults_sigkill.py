"""An import process killed with SIGKILL in the middle of writing: every pair keeps all its old places, the mark
stays, the next tick does not ask again, and once Dagster records the run failed nobody waits on it."""

from __future__ import annotations

import signal

import dagster as dg
import psycopg2
import pytest
from fault_helpers import (
    backends_waiting,
    changed_places,
    execute,
    marks,
    request_pairs,
    run_failure_sensor,
    states,
    stored_places,
    tick,
    wait_until,
)
from overture_helpers import CURRENT, PREVIOUS

from nakodo_dagster import tags
from nakodo_dagster.overture.sample import TAXONOMY, write_sample_release
from nakodo_dagster.placement import CountryLocation, Targeting
from nakodo_dagster.resources import OvertureResource, StoreResource

pytestmark = pytest.mark.faults

# A whole country in the sample's two top levels of categories (every place is in two of them): thousands of rows
# in few pairs, so a half-written pair would show.
EVERYTHING_IN_GB = Targeting(
    (CountryLocation("GB"),), tuple(sorted({name for c in TAXONOMY if c.hierarchy for name in c.hierarchy[:2]}))
)


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory) -> str:
    """The previous release, then a current one with other places: old and new places are told apart."""
    root = tmp_path_factory.mktemp("two_releases")
    for release, seed in ((PREVIOUS, 3), (CURRENT, 7)):
        write_sample_release(root, release=release, rows=20_000, files=4, row_group_rows=500, seed=seed, progress=False)
    return str(root)


def _kill_while_writing_duckdb(workers, child) -> None:
    """Kill the child where it stops: its new places inserted, the old ones deleted, nothing committed."""
    workers.go(child)
    assert child.stdout.readline().strip() == "stopped"
    child.send_signal(signal.SIGKILL)


def _kill_while_writing_postgres(workers, child, url: str) -> None:
    """Hold one old place so the child's delete waits on it mid-transaction, kill the child there, let go."""
    blocker = psycopg2.connect(url)
    watcher = psycopg2.connect(url)
    watcher.autocommit = True
    try:
        blocker.cursor().execute("SELECT 1 FROM places WHERE area = 'country:GB' LIMIT 1 FOR UPDATE")
        workers.go(child)
        wait_until(lambda: backends_waiting(watcher, "DELETE FROM places"), "the import reaching its delete")
        backends = backends_waiting(watcher, "DELETE FROM places")
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        blocker.rollback()

        # The dead client's transaction is rolled back when its server process notices it is gone.
        def gone() -> bool:
            with watcher.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (backends,))
                return cursor.fetchone()[0] == 0

        wait_until(gone, "the dead import's transaction ending")
    finally:
        blocker.close()
        watcher.close()


def test_an_import_killed_while_writing_leaves_every_pair_whole(
    instance, database_url, two_releases, workers, monkeypatch
):
    # The two releases' places carry other ids, so that old and new are told apart: the drift gate would hold every
    # pair for the ids it loses, and the write to kill is one the gate lets through.
    monkeypatch.setenv("NAKODO_DRIFT_MIN_KEPT", "0")
    old = {
        "store": StoreResource(database=database_url),
        "overture": OvertureResource(root=two_releases, release=PREVIOUS),
    }
    store = old["store"].store
    campaign = store.add_campaign("Everything in GB", EVERYTHING_IN_GB)
    [request] = tick(instance, old).run_requests
    assert execute(instance, old, request).success
    pairs = request_pairs(request)
    before = stored_places(store, pairs)
    assert sum(len(held) for held in before.values()) > 3_000
    # Asked for again (a month later, say) by the very run the fault kills: its marks carry the run's stamp.
    store.force_request(pairs, tags.stamp_from_tag(request.tags[tags.STAMP]))
    stamps = marks(store, EVERYTHING_IN_GB)

    on_postgres = database_url.startswith("postgresql://")
    child = workers.start(
        "import",
        {
            "instance": instance.root_directory,
            "store": database_url,
            "root": two_releases,
            "request": {"run_config": request.run_config, "tags": request.tags},
            **({} if on_postgres else {"stop_after": "INSERT INTO places"}),
        },
    )
    if on_postgres:
        _kill_while_writing_postgres(workers, child, database_url)
    else:
        _kill_while_writing_duckdb(workers, child)
    assert child.wait(timeout=30) == -signal.SIGKILL

    assert not changed_places(before, stored_places(store, pairs)), "every pair keeps all its old places"
    assert marks(store, EVERYTHING_IN_GB) == stamps, "the mark stays"
    assert not tick(instance, old).run_requests, "and the next tick does not ask again"
    assert states(store, campaign) == (1, {"coming"})

    # Run monitoring finds the dead worker and records the run failed; the failure sensor stops the wait.
    [killed] = instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.STARTED]))
    instance.report_run_failed(killed)
    run_failure_sensor(instance, killed.run_id, old)

    assert states(store, campaign) == (0, {"failed"})
    assert not tick(instance, old).run_requests
    assert not changed_places(before, stored_places(store, pairs))
