"""The fault soak's checks, each shown to catch what it checks on a store and an instance broken by hand, and a
short soak through its command (bench.faults: the real daemon, the store and Dagster's storage on a PostgreSQL
cluster of its own, the release read from S3 on loopback through the fault proxy): every fault survived, several
kinds among them, every invariant holding."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest
from fault_helpers import execute, tick
from overture_helpers import CURRENT as RELEASE

from bench.faults import (
    broken_invariants,
    campaign_mismatches,
    coverage_against_recount,
    failed_run_headlines,
    is_plain,
    needed_pairs,
)
from nakodo_dagster import tags
from nakodo_dagster.headless import sync
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store.schema import _BUSINESS_COLUMNS

pytestmark = pytest.mark.faults

CAMPAIGNS = {
    "Leeds": Targeting((PointLocation(53.7997, -1.5492, 5),), ("cafe", "pub")),
    "Paris": Targeting((PointLocation(48.8566, 2.3522, 2),), ("cafe",)),
}
# A soak where every invariant holds: each figure below, moved, must be reported.
WHOLE = {
    "pairs_lost": 0,
    "pairs_marked_failed": 0,
    "orphan_marks": 0,
    "pairs_explained_by_plan": {"fresh": 1, "coming": 1, "failed": 0, "missing": 1},
    "campaigns_paused_by_plan_unexplained": 0,
    "pairs_imported_by_two_runs_at_once": 0,
    "max_import_runs_at_once": 2,
    "slots_held_by_ended_runs": 0,
    "coverage_counts": {"kept": {"fresh": 3, "coming": 0, "failed": 0, "missing": 0}},
    "campaign_businesses": {"businesses_held_twice": 0, "businesses_missing": 0, "businesses_not_expected": 0},
    "failed_import_runs": {"run": "import run run failed: the worker of this run died"},
    "faults_injected": {"worker_killed": 1},
    "faults_survived": {"worker_killed": 1},
}
WHOLE["coverage_counts"]["recounted"] = dict(WHOLE["coverage_counts"]["kept"])


def _broken(path: str, value: object) -> dict:
    results = json.loads(json.dumps(WHOLE))
    *parents, name = path.split(".")
    held = results
    for parent in parents:
        held = held[parent]
    held[name] = value
    return results


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("pairs_lost", 1),
        ("pairs_marked_failed", 1),
        ("orphan_marks", 1),
        ("pairs_explained_by_plan.failed", 1),
        ("campaigns_paused_by_plan_unexplained", 1),
        ("pairs_imported_by_two_runs_at_once", 1),
        ("max_import_runs_at_once", 3),
        ("slots_held_by_ended_runs", 1),
        ("coverage_counts.kept.fresh", 2),
        ("campaign_businesses.businesses_held_twice", 1),
        ("campaign_businesses.businesses_missing", 1),
        ("campaign_businesses.businesses_not_expected", 1),
        ("failed_import_runs.run", "psycopg2.OperationalError: server closed the connection unexpectedly"),
        ("faults_survived.worker_killed", 0),
    ],
)
def test_every_broken_invariant_is_reported(path, value):
    assert broken_invariants(WHOLE) == []
    [broken] = broken_invariants(_broken(path, value))
    assert broken.startswith("1 "), broken


def test_a_headline_is_plain_when_a_user_can_read_it():
    assert is_plain("Overture release 2026-11-18.0: file part-00003.parquet is unreadable (truncated or not Parquet)")
    assert is_plain("import run 1a2b failed: Run failed: the run worker exited unexpectedly (process 123)")
    for technical in (
        "",
        "Traceback (most recent call last):",
        "psycopg2.OperationalError: server closed the connection unexpectedly",
        "KeyError: 'pairs'",
        "x" * 301,
    ):
        assert not is_plain(technical), technical


def test_the_checks_hold_on_a_whole_store_and_catch_each_break(instance, duckdb_url, release_root, tmp_path):
    store = StoreResource(database=duckdb_url)
    ids = {name: store.store.add_campaign(name, targeting) for name, targeting in CAMPAIGNS.items()}
    report = sync(instance, store, OvertureResource(root=release_root), wait_seconds=120)
    assert report.failed_runs == [] and report.pending == 0

    coverage = coverage_against_recount(store.store)
    assert coverage["kept"] == coverage["recounted"]
    assert coverage["recounted"]["fresh"] == len(needed_pairs(store.store)) == 5
    found = campaign_mismatches(store.store, Path(release_root))
    assert found["campaigns"] == 2 and found["businesses"] > 10
    assert found["campaigns_mismatched"] == 0, found

    store.store._transact(lambda tx: tx.run("UPDATE coverage_counts SET pairs = pairs + 1 WHERE state = 'fresh'"))
    coverage = coverage_against_recount(store.store)
    assert coverage["kept"]["fresh"] == coverage["recounted"]["fresh"] + 1

    leeds, paris = ids["Leeds"], ids["Paris"]
    dropped, doubled = (business["id"] for business in store.store.campaign_results(leeds)[:2])
    stray = store.store.campaign_results(paris)[0]["id"]
    copied = _BUSINESS_COLUMNS.replace("campaign_id", "$to")
    copy = (
        f"INSERT INTO campaign_businesses ({_BUSINESS_COLUMNS}) SELECT {copied} FROM campaign_businesses "
        "WHERE campaign_id = $source AND place_id = $place"
    )

    def damage(tx) -> None:
        tx.run("DELETE FROM campaign_businesses WHERE campaign_id = $to AND place_id = $place", to=leeds, place=dropped)
        # DuckDB's campaign_businesses has no primary key: only the searches keep a business once per campaign.
        tx.run(copy, to=leeds, source=leeds, place=doubled)
        tx.run(copy, to=leeds, source=paris, place=stray)

    store.store._transact(damage)
    found = campaign_mismatches(store.store, Path(release_root))
    assert (found["businesses_missing"], found["businesses_held_twice"], found["businesses_not_expected"]) == (1, 1, 1)
    assert found["campaigns_mismatched"] == 1


def test_each_failed_import_run_is_found_with_its_headline(instance, duckdb_url, tmp_path):
    # A release whose only file is not Parquet: the import fails and says so in its first line.
    folder = tmp_path / "broken" / RELEASE / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    (folder / "part-00000.zstd.parquet").write_bytes(b"PAR1 this is not a parquet file")
    resources = {
        "store": StoreResource(database=duckdb_url),
        "overture": OvertureResource(root=str(tmp_path / "broken")),
    }
    resources["store"].store.add_campaign("Leeds", CAMPAIGNS["Leeds"])
    [request] = tick(instance, resources).run_requests
    failed = execute(instance, resources, request)
    # A run that died without a word of its own, as a killed worker's would if nobody explained it.
    silent = instance.create_run_for_job(import_places, run_config=request.run_config, tags={**request.tags})
    instance.report_run_failed(silent, "Traceback (most recent call last):")

    headlines = failed_run_headlines(instance)

    assert set(headlines) == {failed.run_id, silent.run_id}
    assert headlines[failed.run_id].startswith(f"Overture release {RELEASE}: file part-00000.zstd.parquet")
    assert is_plain(headlines[failed.run_id])
    assert headlines[silent.run_id] == "Traceback (most recent call last):"
    assert instance.get_run_by_id(silent.run_id).tags[tags.KIND] == tags.IMPORT_KIND
    assert instance.get_run_by_id(silent.run_id).status == dg.DagsterRunStatus.FAILURE


# Kinds the fleet comes back from in seconds, met once each: the daemon's process group or a worker killed waits out
# the 75 s before its slots are freed (test_faults_daemon_killed.py and the long soak meet those), and a new release
# is written first (the long soak).
SHORT_KINDS = (
    "cancelled_running",
    "code_server_killed",
    "plan_downgraded",
    "postgres_stopped",
    "s3_slowdown",
    "release_truncated",
)


@pytest.mark.slow
# The soak's own process has 900 s.
@pytest.mark.timeout(1200)
def test_a_short_soak_survives_its_faults_and_every_invariant_holds():
    command = [
        *(sys.executable, "-m", "bench.faults", "--seed", "3", "--campaigns", "6", "--accounts", "2"),
        *("--faults", str(len(SHORT_KINDS)), "--kinds", ",".join(SHORT_KINDS)),
    ]
    finished = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    assert finished.returncode == 0, finished.stderr[-3000:]
    soak = json.loads(finished.stdout)
    told = {key: soak[key] for key in ("invariants_broken", "failed_marks", "failed_import_runs", "fault_timeline")}
    assert soak["invariants_broken"] == [], json.dumps(told, indent=1)
    # The PostgreSQL cluster stopped holds Dagster's storage as well as the store.
    assert (soak["store"], soak["instance"]) == ("postgres", "postgres"), soak
    assert soak["faults_injected"] == dict.fromkeys(SHORT_KINDS, 1), soak
    assert soak["campaigns_paused_by_plan"] > 0, soak
    assert soak["campaign_businesses"]["campaigns"] > 0 and soak["campaign_businesses"]["businesses"] > 0
