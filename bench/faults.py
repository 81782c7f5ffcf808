"""The fault soak: the real ``dagster-daemon`` with the embedded default's dagster.yaml (its run launcher, run
monitoring, run retries and slot freeing), a store on a PostgreSQL cluster of the soak's own (or a DuckDB file), a
sample release read from a loopback S3 server through a fault proxy, and campaigns over it; while imports run,
faults on a seeded schedule, each several times: the daemon's whole process group killed with SIGKILL and started
again, a run's worker killed mid-import, an import cancelled while queued and while running, a campaign paused and
resumed while its imports run, the store's PostgreSQL stopped for 5 to 30 s and started again, and bursts of 5 to
60 s of the object store answering 503 SlowDown, resetting connections or stalling every request.

At the end, from the store and the instance, not from logs: every pair an active campaign needs is loaded, none
marked failed, no mark waits without a run, no pair was imported by two runs at once, at most two import runs ran
at once, no pool slot is held by a run that ended; the store's kept coverage counts equal a full recount; each
active campaign holds exactly the businesses an independent reading of the release files gives (none twice, none
missing, none extra); every failed import run says why in one plain line. ``invariants_broken`` lists, in words,
each that does not hold.

``python -m bench.faults [--seed N] [--campaigns N] [--faults N] [--store postgres|duckdb] [--release-root PATH]``
prints the figures as JSON; the same seed replays the same schedule of faults (the moments the runs meet them
depend on the machine).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import yaml
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG

from bench.daemon import PROJECT, running_daemon
from bench.fault_proxy import BURSTS, FaultProxy, Rule, burst, start_proxy
from bench.independent import campaign_businesses, expected_rows
from bench.proxy import LatencyProxy
from bench.s3 import loopback_releases
from bench.throwaway_postgres import ThrowawayPostgres, start_throwaway_postgres
from nakodo_dagster import tags
from nakodo_dagster.assets.places import IMPORT_POOL
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job
from nakodo_dagster.overture.sample import CITIES, write_sample_release
from nakodo_dagster.placement import REQUESTED, Cutoffs, PointLocation, Targeting, areas_for
from nakodo_dagster.placement import import_runs as runs_for_pairs
from nakodo_dagster.store import Store, open_store
from nakodo_dagster.store.models import PAIR_STATES

KINDS = ("daemon_killed", "worker_killed", "cancelled_queued", "cancelled_running", "campaign_paused", *BURSTS)
# Met only with the store on a PostgreSQL cluster of the soak's own.
STORE_KINDS = ("postgres_stopped",)
STORES = ("postgres", "duckdb")
# How long the store's PostgreSQL stays stopped: a restart by a service manager to a failover.
STORE_STOPPED_SECONDS = (5, 30)
# How long a burst of the object store's faults lasts: from a few throttled requests to an outage that outlasts the
# read's own tries (seconds) many times over.
BURST_SECONDS = (5, 60)
CATEGORIES = ("bakery", "cafe", "restaurant")
RADII_KM = (2, 5, 10)
# Campaigns within this of one of the sample release's cities, where its places are.
OFFSET_DEGREES = 0.3
FINISHED = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
FAILED = dg.DagsterRunStatus.FAILURE
UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
# How long the fleet may take to come back after a fault before the soak calls it stuck: slots of a killed run are
# freed 75 s after it ended (dagster.yaml), then run monitoring's next look (30 s), then the import sensor's (30 s).
STUCK_SECONDS = 300
# A campaign paused this long while its imports run, then resumed.
PAUSE_SECONDS = 20
# Import runs at once: the project's dagster.yaml limits runs tagged nakodo/kind=import to two.
IMPORT_SLOTS = 2
# A headline longer than this is a dump, not a line to read.
HEADLINE_CHARACTERS = 300
# A traceback, or an exception's dotted class name and its message: what a failure says when nobody explained it.
_TECHNICAL = re.compile(r"Traceback|[\w.]*\.\w*(Error|Exception)\b|\w+(Error|Exception):")
# After the last pair landed: the search sensor's next look (30 s), a pair visible once COMMIT_OVERLAP (1 minute)
# older than the search before, and the search run.
SEARCH_CATCH_UP_SECONDS = 240


@dataclass
class Fault:
    kind: str
    # Seconds since the epoch: the instance's and the store's clocks.
    at: float
    # The import run it hit, if it hit one; the campaign it paused.
    run_id: str | None = None
    campaign_id: int | None = None
    pairs: list[tuple[str, str]] = field(default_factory=list)
    recovered_at: float | None = None
    # How long the fault lasted, for one that is undone after a while (the store stopped, a burst).
    seconds: float | None = None
    # A burst's rule at the fault proxy: the requests it met.
    rule: Rule | None = None


@dataclass(frozen=True)
class ObjectStore:
    """The sample release on a loopback S3 server: its s3:// root, read through the fault ``proxy``."""

    root: str
    proxy: FaultProxy


def daemon_home(
    folder: Path, release_root: str, database: str | None = None, endpoint: str | None = None
) -> tuple[Path, dict[str, str]]:
    """A workspace of the code location in ``folder`` and the environment a daemon serving it runs with: a fresh
    DAGSTER_HOME holding the embedded default's dagster.yaml, the store ``database`` (default: a DuckDB file beside
    it), a release index beside it, and, for an s3:// ``release_root``, the S3-compatible ``endpoint`` to read it
    from, anonymously as Overture's bucket is read."""
    home = folder / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "nakodo_dagster" / "data" / "dagster.yaml", home / "dagster.yaml")
    workspace = folder / "workspace.yaml"
    location = {"module_name": "nakodo_dagster.definitions", "working_directory": str(folder)}
    workspace.write_text(yaml.safe_dump({"load_from": [{"python_module": location}]}))
    environ = {
        **{name: value for name, value in os.environ.items() if not name.startswith(("NAKODO_", "DAGSTER_", "AWS_"))},
        "DAGSTER_HOME": str(home),
        "NAKODO_DATABASE": database or str(folder / "store.duckdb"),
        "NAKODO_OVERTURE_ROOT": release_root,
        "NAKODO_OVERTURE_RELEASE": "",
        "NAKODO_OVERTURE_INDEX": str(folder / "overture_index"),
        **({"AWS_ENDPOINT_URL": endpoint, "AWS_EC2_METADATA_DISABLED": "true"} if endpoint else {}),
    }
    return workspace, environ


def import_runs(instance: dg.DagsterInstance, statuses: list[dg.DagsterRunStatus] | None = None) -> list[dg.DagsterRun]:
    """The import runs of the instance, of these statuses (all if None)."""
    return list(instance.get_runs(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}, statuses=statuses or [])))


def run_pairs(run: dg.DagsterRun) -> list[tuple[str, str]]:
    """The (area, category) pairs an import run was to write."""
    return [tuple(pair) for pair in import_payload(run.run_config)["pairs"]]


def slots_held_by_ended_runs(instance: dg.DagsterInstance) -> set[str]:
    """The runs that ended and still hold a slot of the import pool."""
    holders = instance.event_log_storage.get_concurrency_info(IMPORT_POOL).active_run_ids
    if not holders:
        return set()
    return {run.run_id for run in instance.get_runs(dg.RunsFilter(run_ids=list(holders))) if run.status in FINISHED}


def needed_pairs(store: Store) -> set[tuple[str, str]]:
    """Every (area, category) pair an active campaign needs."""
    return {
        (area, category)
        for campaign in store.campaigns(active_only=True)
        for area in areas_for(campaign.targeting)
        for category in campaign.targeting.categories
    }


def pair_states(store: Store, pairs: set[tuple[str, str]], now: datetime | None = None) -> Counter:
    """How many of these pairs are fresh, coming, failed or missing at ``now`` (default: now), as every policy
    reads them."""
    cutoffs = Cutoffs.at(now or datetime.now(UTC))
    rows = {(r.area, r.category): r for r in store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})}
    return Counter(cutoffs.row_state(rows[pair]) if pair in rows else "missing" for pair in pairs)


def coverage_against_recount(store: Store) -> dict[str, dict[str, int]]:
    """The store's kept coverage counts (moved pair by pair as they change) beside a full recount from the active
    campaigns' targeting and place_imports, at the same moment."""
    now = datetime.now(UTC)
    recounted = pair_states(store, needed_pairs(store), now)
    return {
        "kept": store.coverage(now, 0).counts,
        "recounted": {state: recounted[state] for state in PAIR_STATES},
    }


def campaign_mismatches(store: Store, release_root: Path) -> Counter:
    """Every active campaign's businesses against an independent reading of the release files under
    ``release_root`` (bench.independent: pyarrow and WGS84 geodesics): the places, in the release each pair was
    imported from, of the pairs its targeting needs that are fresh, within its circles. Counts the campaigns and
    businesses checked, businesses held twice, missing, and held but not expected, and the campaigns with any."""
    cutoffs = Cutoffs.at(datetime.now(UTC))
    needed = needed_pairs(store)
    fresh = [
        row
        for row in store.import_rows({a for a, _ in needed}, {c for _, c in needed})
        if (row.area, row.category) in needed and cutoffs.row_state(row) == "fresh"
    ]
    # Read once per block for every campaign: the campaigns of a soak share most of their blocks.
    places: dict[tuple[str, str], list] = {}
    for release in {row.release for row in fresh}:
        categories: dict[str, list[str]] = {}
        for row in fresh:
            if row.release == release:
                categories.setdefault(row.area, []).append(row.category)
        for run in runs_for_pairs(categories, {}):
            for place in expected_rows(release_root, release, run):
                places.setdefault((place[10], place[2]), []).append(place)
    found = Counter()
    for campaign in store.campaigns(active_only=True):
        targeting = campaign.targeting
        rows = [place for a in areas_for(targeting) for c in targeting.categories for place in places.get((a, c), [])]
        inside, edge = campaign_businesses(rows, targeting)
        held = [business["id"] for business in store.campaign_results(campaign.id)]
        wrong = {
            "businesses_held_twice": len(held) - len(set(held)),
            "businesses_missing": len(inside - set(held)),
            "businesses_not_expected": len(set(held) - inside - edge),
        }
        found.update({"campaigns": 1, "businesses": len(held), **wrong})
        found["campaigns_mismatched"] += any(wrong.values())
    return found


def failure_headline(instance: dg.DagsterInstance, run_id: str) -> str:
    """Why a failed run failed, in the one line the project keeps with its pairs: its failed step's own words (a
    dg.Failure's description, as places.failure_headline), else that step's error, else its run failure's
    (run monitoring's words for a worker that died, as the failure sensor keeps them); empty if none says."""
    steps = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
    runs = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    texts = [
        *(
            (failure.user_failure_data.description if failure.user_failure_data else None) or failure.error.message
            for failure in (record.event_log_entry.dagster_event.step_failure_data for record in steps)
        ),
        *(record.event_log_entry.dagster_event.message for record in runs),
    ]
    return next((text.strip().splitlines()[0] for text in texts if text and text.strip()), "")


def is_plain(headline: str) -> bool:
    """Whether a failure's headline is a sentence a user can act on: not empty, short, not a traceback nor an
    exception's bare repr (``psycopg2.OperationalError: ...``)."""
    return bool(headline) and len(headline) <= HEADLINE_CHARACTERS and not _TECHNICAL.match(headline)


def failed_run_headlines(instance: dg.DagsterInstance) -> dict[str, str]:
    """Each failed import run's headline (``failure_headline``), by run id."""
    return {run.run_id: failure_headline(instance, run.run_id) for run in import_runs(instance, [FAILED])}


class Fleet:
    """The daemon serving the soak, killed and started again on demand; the PostgreSQL cluster of its store (None
    for a DuckDB store), stopped and started again on demand; the fault proxy in front of its object store."""

    def __init__(
        self,
        workspace: Path,
        environ: dict[str, str],
        folder: Path,
        proxy: FaultProxy,
        postgres: ThrowawayPostgres | None = None,
    ) -> None:
        self.workspace, self.environ, self.folder, self.proxy, self.postgres = (
            workspace,
            environ,
            folder,
            proxy,
            postgres,
        )
        self.starts = 0
        self._stack = contextlib.ExitStack()
        self.daemon: subprocess.Popen | None = None

    def start(self) -> float:
        self.starts += 1
        log = self.folder / f"daemon_{self.starts}.log"
        self.daemon = self._stack.enter_context(running_daemon(self.workspace, self.environ, log))
        return time.monotonic()

    def kill(self) -> None:
        """SIGKILL to the daemon's whole process group: the daemon, its code server, fork server and run workers."""
        assert self.daemon is not None
        os.killpg(self.daemon.pid, signal.SIGKILL)
        self.daemon.wait()
        self._stack.close()

    def stop_store(self, seconds: float) -> None:
        """The store's PostgreSQL stopped at once (every connection cut, nothing answering) for ``seconds``, then
        started again, as a crashed server is by its service manager."""
        assert self.postgres is not None
        self.postgres.halt()
        try:
            time.sleep(seconds)
        finally:
            self.postgres.start()

    def stop(self) -> None:
        self._stack.close()

    def log_tail(self) -> str:
        return (self.folder / f"daemon_{self.starts}.log").read_text()[-3000:]


def _campaigns(rng: random.Random, count: int) -> list[Targeting]:
    targetings = []
    for _ in range(count):
        city = rng.choice(CITIES)
        lat = round(min(89.0, max(-89.0, city.lat + rng.uniform(-OFFSET_DEGREES, OFFSET_DEGREES))), 4)
        lng = round(min(180.0, max(-180.0, city.lng + rng.uniform(-OFFSET_DEGREES, OFFSET_DEGREES))), 4)
        categories = tuple(sorted(rng.sample(CATEGORIES, rng.randint(1, 2))))
        targetings.append(Targeting((PointLocation(lat, lng, rng.choice(RADII_KM)),), categories))
    return targetings


def _wait(what: str, seconds: float, ready: Callable[[], object], fleet: Fleet) -> object:
    deadline = time.monotonic() + seconds
    while not (found := ready()):
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {seconds:.0f} s for {what}\n{fleet.log_tail()}")
        time.sleep(0.2)
    return found


def _landed_at(store: Store, pairs: list[tuple[str, str]], since: float) -> float | None:
    """When the last of these pairs landed (seconds since the epoch; ``since`` if all had landed before it, as
    when a cancel reaches a run that has written its pairs), or None if one has not."""
    if not pairs:
        return None
    wanted = set(pairs)
    # The rows of every area with every category: pairs of other runs among them.
    rows = store.import_rows({a for a, _ in wanted}, {c for _, c in wanted})
    landed = [
        row.imported_at.timestamp() for row in rows if (row.area, row.category) in wanted and row.release != REQUESTED
    ]
    if len(landed) < len(wanted):
        return None
    return max(*landed, since)


def _inject(kind: str, instance: dg.DagsterInstance, store: Store, fleet: Fleet, rng: random.Random) -> Fault | None:
    """One fault of ``kind``, or None when there was nothing for it to hit (no run queued, none running)."""
    if kind in ("daemon_killed", "postgres_stopped", *BURSTS):
        # Once imports are running: a restart that hits nothing in flight proves little. A burst once an import is
        # queued: a run reads the release in its first seconds, so the burst meets the next one's read.
        wanted = dg.DagsterRunStatus.QUEUED if kind in BURSTS else dg.DagsterRunStatus.STARTED
        with contextlib.suppress(RuntimeError):
            _wait(f"an import run {wanted.value}", 30, lambda: import_runs(instance, [wanted]), fleet)
        in_flight = [pair for run in import_runs(instance, [dg.DagsterRunStatus.STARTED]) for pair in run_pairs(run)]
        at = time.time()
        if kind == "postgres_stopped":
            seconds = round(rng.uniform(*STORE_STOPPED_SECONDS), 1)
            fleet.stop_store(seconds)
            return Fault(kind, at, pairs=in_flight, seconds=seconds)
        if kind in BURSTS:
            # Left to run its course while the schedule goes on: an object store's trouble does not wait its turn.
            seconds = round(rng.uniform(*BURST_SECONDS), 1)
            return Fault(kind, at, pairs=in_flight, seconds=seconds, rule=fleet.proxy.add(burst(kind, seconds)))
        fleet.kill()
        # Started again at once, as Kubernetes or a service manager does.
        fleet.start()
        return Fault(kind, at, pairs=in_flight)
    if kind == "campaign_paused":
        campaign = rng.choice(store.campaigns(active_only=True))
        store.set_campaign_status(campaign.id, "paused")
        return Fault(kind, time.time(), campaign_id=campaign.id)
    wanted = dg.DagsterRunStatus.QUEUED if kind == "cancelled_queued" else dg.DagsterRunStatus.STARTED
    with contextlib.suppress(RuntimeError):
        _wait(f"an import run {wanted.value}", 30, lambda: import_runs(instance, [wanted]), fleet)
    runs = import_runs(instance, [wanted])
    if kind == "worker_killed":
        runs = [run for run in runs if tags.RUN_WORKER_PID in run.tags]
    if not runs:
        return None
    run = rng.choice(runs)
    if kind == "worker_killed":
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(run.tags[tags.RUN_WORKER_PID]), signal.SIGKILL)
    else:
        instance.run_coordinator.cancel_run(run.run_id)
    return Fault(kind, time.time(), run_id=run.run_id, pairs=run_pairs(run))


def _hit_pairs(fault: Fault, instance: dg.DagsterInstance) -> list[tuple[str, str]]:
    """The pairs ``fault`` hit: its run's, or those of the imports in flight when it began and, for one that lasts
    (the store stopped, a burst), of those started while it lasted."""
    if fault.seconds is None:
        return fault.pairs
    end = fault.at + fault.seconds
    started = [
        pair
        for record in instance.get_run_records(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}))
        if record.start_time and fault.at <= record.start_time <= end
        for pair in run_pairs(record.dagster_run)
    ]
    return fault.pairs + started


def _recovered(fault: Fault, instance: dg.DagsterInstance, store: Store) -> float | None:
    """When the fleet came back from ``fault`` (seconds since the epoch), or None if it has not: the pairs it hit
    landed (``_hit_pairs``; the daemon's: those of the imports in flight, else the first import after the
    restart); a paused campaign, once resumed."""
    if fault.kind == "campaign_paused":
        return fault.recovered_at
    if pairs := _hit_pairs(fault, instance):
        return _landed_at(store, [pair for pair in pairs if pair in needed_pairs(store)], fault.at)
    if fault.seconds is not None:
        # No import ran while it lasted: nothing had to come back but the store or the object store itself.
        return fault.at + fault.seconds
    ends = [
        record.end_time
        for record in instance.get_run_records(
            dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}, statuses=[dg.DagsterRunStatus.SUCCESS])
        )
        if record.start_time and record.start_time > fault.at
    ]
    return min(ends) if ends else None


def _spans(instance: dg.DagsterInstance) -> list[tuple[float, float, dg.DagsterRun]]:
    records = instance.get_run_records(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}))
    return [(r.start_time, r.end_time, r.dagster_run) for r in records if r.start_time and r.end_time]


def _most_at_once(spans: list[tuple[float, float, dg.DagsterRun]]) -> int:
    edges = sorted([(start, 1) for start, _, _ in spans] + [(end, -1) for _, end, _ in spans])
    return max(itertools.accumulate(step for _, step in edges), default=0)


def _pairs_imported_twice_at_once(spans: list[tuple[float, float, dg.DagsterRun]]) -> int:
    by_pair: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for start, end, run in spans:
        for pair in run_pairs(run):
            by_pair.setdefault(pair, []).append((start, end))
    overlapping = 0
    for intervals in by_pair.values():
        intervals.sort()
        overlapping += any(later[0] < earlier[1] for earlier, later in itertools.pairwise(intervals))
    return overlapping


def _orphan_marks(instance: dg.DagsterInstance, store: Store, pairs: set[tuple[str, str]]) -> int:
    """Marks `requested`, not failed, whose stamp no queued or running run carries."""
    rows = store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})
    orphans = 0
    for row in rows:
        if row.release != REQUESTED or row.failure:
            continue
        stamp = tags.stamp_tag(row.imported_at)
        if not instance.get_runs_count(dg.RunsFilter(tags={tags.STAMP: stamp}, statuses=UNFINISHED)):
            orphans += 1
    return orphans


def searches_caught_up(instance: dg.DagsterInstance, store: Store) -> bool:
    """Whether every active campaign's last search read the newest places of its pairs, with no search run on its
    way: what the campaigns hold is then what the fleet gives them."""
    if instance.get_runs_count(dg.RunsFilter(job_name=search_campaigns_job.name, statuses=UNFINISHED)):
        return False
    return all(
        progress.arrived_at is None
        or (progress.searched_landed is not None and progress.searched_landed >= progress.arrived_at)
        for progress in store.search_progress(datetime.now(UTC))
    )


def broken_invariants(results: dict) -> list[str]:
    """Each invariant the soak's figures break, in words; empty when every one holds."""
    coverage, businesses = results["coverage_counts"], results["campaign_businesses"]
    unplain = [headline for headline in results["failed_import_runs"].values() if not is_plain(headline)]
    checks = [
        (results["pairs_lost"], "needed pairs not loaded"),
        (results["pairs_marked_failed"], "needed pairs marked failed for a fault a retry could fix"),
        (results["orphan_marks"], "marks waited on without a run"),
        (results["pairs_imported_by_two_runs_at_once"], "pairs imported by two runs at once"),
        (max(0, results["max_import_runs_at_once"] - IMPORT_SLOTS), f"import runs beyond {IMPORT_SLOTS} at once"),
        (results["slots_held_by_ended_runs"], "pool slots held by runs that ended"),
        (
            sum(coverage["kept"][state] != coverage["recounted"][state] for state in PAIR_STATES),
            f"states whose kept coverage count is not the full recount's ({coverage})",
        ),
        (businesses["businesses_held_twice"], "businesses held twice by a campaign"),
        (businesses["businesses_missing"], "businesses missing from a campaign"),
        (businesses["businesses_not_expected"], "businesses a campaign holds and should not"),
        (len(unplain), f"failed import runs without a plain one-line headline: {unplain[:3]}"),
        (
            sum(results["faults_injected"].values()) - sum(results["faults_survived"].values()),
            "faults the fleet did not come back from",
        ),
    ]
    return [f"{count} {what}" for count, what in checks if count]


def _first_business_waits(store: Store) -> list[float]:
    """For each campaign with businesses, seconds from its creation to its first business."""
    rows = store._transact(
        lambda tx: tx.rows(
            "SELECT c.created_at, min(b.added_at) FROM campaigns c JOIN campaign_businesses b "
            "ON b.campaign_id = c.id GROUP BY c.id, c.created_at"
        )
    )
    return [(first - created).total_seconds() for created, first in rows]


def soak(
    release_root: str,
    remote: ObjectStore,
    seed: int,
    campaigns: int,
    faults: int,
    folder: Path,
    postgres: ThrowawayPostgres | None,
) -> dict:
    """Run the soak in ``folder``, reading the releases under ``release_root`` from ``remote``, its store on
    ``postgres`` (a DuckDB file in ``folder`` if None), and return its figures and invariants."""
    rng = random.Random(seed)
    workspace, environ = daemon_home(folder, remote.root, postgres.url if postgres else None, remote.proxy.endpoint)
    store = open_store(environ["NAKODO_DATABASE"])
    store.migrate()
    targetings = _campaigns(rng, campaigns)
    # Each kind in turn, in a seeded order, so that every kind is met several times in a long soak.
    met = KINDS + (STORE_KINDS if postgres else ())
    kinds = [met[number % len(met)] for number in range(faults)]
    rng.shuffle(kinds)
    schedule = [(rng.uniform(2, 15), kind) for kind in kinds]
    fleet = Fleet(workspace, environ, folder, remote.proxy, postgres)
    injected: list[Fault] = []
    with dg.DagsterInstance.from_config(str(environ["DAGSTER_HOME"])) as instance:
        # The instance's storage is made before the daemon and its code server start (see bench.daemon).
        instance.get_runs_count()
        started = time.monotonic()
        fleet.start()
        try:
            # Campaigns arrive in waves, one before each fault, so that every fault meets imports in flight.
            waves = [targetings[number :: faults + 1] for number in range(faults + 1)]
            added = itertools.count()
            for targeting in waves[0]:
                store.add_campaign(f"soak {next(added)}", targeting)
            _wait("the first import run to start", STUCK_SECONDS, lambda: import_runs(instance), fleet)
            paused: list[Fault] = []
            for (gap, kind), wave in zip(schedule, waves[1:], strict=True):
                for targeting in wave:
                    store.add_campaign(f"soak {next(added)}", targeting)
                time.sleep(gap)
                for fault in [f for f in paused if time.time() - f.at >= PAUSE_SECONDS]:
                    store.set_campaign_status(fault.campaign_id, "active")
                    fault.recovered_at = time.time()
                    paused.remove(fault)
                fault = _inject(kind, instance, store, fleet, rng)
                if fault is not None:
                    injected.append(fault)
                    paused += [fault] if kind == "campaign_paused" else []
            for fault in paused:
                store.set_campaign_status(fault.campaign_id, "active")
                fault.recovered_at = time.time()
            needed = needed_pairs(store)
            _wait(
                "every needed pair to land",
                STUCK_SECONDS + 60 * len(targetings),
                lambda: (
                    set(pair_states(store, needed)) <= {"fresh", "failed"} and not import_runs(instance, UNFINISHED)
                ),
                fleet,
            )
            landed = time.monotonic()
            # A search that never catches up is what the check of the campaigns' businesses reports.
            with contextlib.suppress(RuntimeError):
                _wait(
                    "every campaign searched since its pairs landed",
                    SEARCH_CATCH_UP_SECONDS,
                    lambda: searches_caught_up(instance, store),
                    fleet,
                )
            # The slots of a run killed last are freed 75 s after it ended.
            with contextlib.suppress(RuntimeError):
                _wait("no slot held by a run that ended", 150, lambda: not slots_held_by_ended_runs(instance), fleet)
            for fault in injected:
                if (at := _recovered(fault, instance, store)) is not None:
                    fault.recovered_at = at
            spans = _spans(instance)
            states = pair_states(store, needed)
            waits = _first_business_waits(store)
            runs = import_runs(instance)
            results = {
                "seed": seed,
                "store": "postgres" if postgres else "duckdb",
                "campaigns": campaigns,
                "pairs_needed": len(needed),
                "pairs_fresh": states["fresh"],
                "pairs_marked_failed": states["failed"],
                "pairs_lost": len(needed) - states["fresh"],
                "orphan_marks": _orphan_marks(instance, store, needed),
                "import_runs": len(runs),
                "import_runs_failed": sum(r.status == dg.DagsterRunStatus.FAILURE for r in runs),
                "import_runs_retried": sum(AUTO_RETRY_RUN_ID_TAG in r.tags for r in runs),
                "import_runs_cancelled": sum(r.status == dg.DagsterRunStatus.CANCELED for r in runs),
                "max_import_runs_at_once": _most_at_once(spans),
                "pairs_imported_by_two_runs_at_once": _pairs_imported_twice_at_once(spans),
                "slots_held_by_ended_runs": len(slots_held_by_ended_runs(instance)),
                "faults_injected": dict(Counter(f.kind for f in injected)),
                "faults_survived": dict(Counter(f.kind for f in injected if f.recovered_at is not None)),
                "fault_seconds": {
                    kind: [f.seconds for f in injected if f.kind == kind]
                    for kind in {f.kind for f in injected if f.seconds is not None}
                },
                "requests_faulted": {
                    kind: sum(f.rule.hits for f in injected if f.kind == kind)
                    for kind in {f.kind for f in injected if f.rule is not None}
                },
                "seconds_to_recover_max": {
                    kind: round(max(f.recovered_at - f.at for f in injected if f.kind == kind and f.recovered_at), 1)
                    for kind in {f.kind for f in injected if f.recovered_at}
                },
                "coverage_counts": coverage_against_recount(store),
                "campaign_businesses": dict(campaign_mismatches(store, Path(release_root))),
                "failed_import_runs": failed_run_headlines(instance),
                "campaigns_with_businesses": len(waits),
                "longest_wait_for_first_businesses_seconds": round(max(waits, default=0), 1),
                "seconds": round(landed - started, 1),
                "load_average": os.getloadavg()[0],
            }
            results["invariants_broken"] = broken_invariants(results)
        finally:
            fleet.stop()
    return results


@contextlib.contextmanager
def _release(root: str | None) -> Iterator[str]:
    if root:
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="nakodo-release-") as folder:
        write_sample_release(folder, rows=200_000, seed=7, progress=False)
        yield folder


@contextlib.contextmanager
def _object_store(release_root: str) -> Iterator[ObjectStore]:
    """The releases under ``release_root`` on a loopback S3 server, behind the fault proxy."""
    # moto reads a whole object for each range GET (bench.proxy): the latency proxy, at no latency, answers them
    # from its copy instead, so that a big release costs the machine what S3's would.
    with loopback_releases(Path(release_root)) as (root, upstream), LatencyProxy(upstream, 0.0) as copies:
        # Unbounded: the soak's own deadlines stop a client that retries for ever.
        proxy, server = start_proxy(copies.url, limit=None)
        try:
            yield ObjectStore(root, proxy)
        finally:
            server.shutdown()
            server.server_close()


@contextlib.contextmanager
def _store_server(store: str) -> Iterator[ThrowawayPostgres | None]:
    if store == "duckdb":
        yield None
        return
    server = start_throwaway_postgres()
    try:
        yield server
    finally:
        server.stop()


def measure_faults(release_root: str | None, seed: int, campaigns: int, faults: int, store: str = "postgres") -> dict:
    """The soak on a fresh folder (and a sample release written there unless ``release_root`` is given), read from
    a loopback S3 server through the fault proxy, its store on a PostgreSQL cluster of its own (``store``
    postgres) or in a DuckDB file (duckdb)."""
    with (
        _release(release_root) as root,
        _object_store(root) as remote,
        tempfile.TemporaryDirectory(prefix="nakodo-soak-") as folder,
        _store_server(store) as postgres,
    ):
        return soak(root, remote, seed, campaigns, faults, Path(folder), postgres)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    parser.add_argument("--seed", type=int, default=40, help="seed of the campaigns and the faults' schedule")
    parser.add_argument("--campaigns", type=int, default=40, help="campaigns over the sample release (default 40)")
    # Two of each of the nine kinds.
    parser.add_argument("--faults", type=int, default=18, help="faults to inject (default 18)")
    parser.add_argument(
        "--release-root",
        help="a folder of releases, served from a loopback S3 server (default: a sample release written here)",
    )
    parser.add_argument(
        "--store",
        choices=STORES,
        default=STORES[0],
        help="the store: a PostgreSQL cluster the soak starts on a free port and stops for a while as a fault "
        "(default), or a DuckDB file",
    )
    args = parser.parse_args(argv)
    # moto's server logs every request it answers: thousands of lines that bury the soak's own.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    print(json.dumps(measure_faults(args.release_root, args.seed, args.campaigns, args.faults, args.store), indent=2))


if __name__ == "__main__":
    main()
