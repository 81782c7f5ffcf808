"""The fault soak: the real ``dagster-daemon`` with the embedded default's dagster.yaml (its run launcher, run
monitoring, run retries and slot freeing) and a webserver, Dagster's own storage and the store on a PostgreSQL
cluster of the soak's own (or SQLite and a DuckDB file), a sample release read from a loopback S3 server through a
fault proxy, and campaigns over several accounts; while imports run, faults on a seeded schedule, each several
times: the daemon's whole process group killed with SIGKILL and started again, its code server killed alone, a
run's worker killed mid-import, an import cancelled through the webserver's GraphQL API while queued and while
running, a campaign paused and resumed while its imports run, an account moved to a smaller plan, the PostgreSQL
cluster stopped for 5 to 30 s and started again (the store's and Dagster's connections both cut), bursts of 5 to
60 s of the object store answering 503 SlowDown, resetting connections or stalling every request, the release's
files cut short in the bucket for 5 to 30 s, and a new release published.

At the end, from the store and the instance, not from logs: every pair an active campaign needs is loaded, none
marked failed, no mark waits without a run, no pair was imported by two runs at once, at most two import runs ran
at once, no pool slot is held by a run that ended; the pairs only campaigns paused by a smaller plan need are
explained by it (none failed, each such campaign with its plain reason); the store's kept coverage counts equal a
full recount; each active campaign holds exactly the businesses an independent reading of the release files gives
(none twice, none missing, none extra); every failed import run says why in one plain line.
``invariants_broken`` lists, in words, each that does not hold.

``python -m bench.faults [--seed N] [--campaigns N] [--accounts N] [--faults N] [--kinds K,...] [--store
postgres|duckdb] [--release-root PATH]`` prints the figures as JSON; the same seed replays the same schedule of
faults (the moments the runs meet them depend on the machine).
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
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import dagster as dg
import psutil
import yaml
from dagster._core.definitions.run_request import InstigatorType
from dagster._core.scheduler.instigation import TickStatus
from dagster._core.storage.tags import AUTO_RETRY_RUN_ID_TAG
from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

from bench.daemon import PROJECT, running_daemon, stop_group
from bench.fault_proxy import BURSTS, FaultProxy, Rule, burst, start_proxy
from bench.independent import campaign_businesses, expected_rows
from bench.proxy import LatencyProxy
from bench.s3 import BUCKET, PREFIX, loopback_releases, s3_client
from bench.throwaway_postgres import ThrowawayPostgres, free_port, start_throwaway_postgres
from nakodo_dagster import tags
from nakodo_dagster.assets.places import IMPORT_POOL
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job
from nakodo_dagster.overture.releases import list_releases
from nakodo_dagster.overture.sample import CITIES, write_sample_release
from nakodo_dagster.placement import REQUESTED, Cutoffs, PointLocation, Targeting, areas_for
from nakodo_dagster.placement import import_runs as runs_for_pairs
from nakodo_dagster.plan_config import plan_named
from nakodo_dagster.sensors.failure_sensor import run_failure_headline
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.store import Store, open_store
from nakodo_dagster.store.models import PAIR_STATES, Campaign

KINDS = (
    "daemon_killed",
    "code_server_killed",
    "worker_killed",
    "cancelled_queued",
    "cancelled_running",
    "campaign_paused",
    "plan_downgraded",
    "release_truncated",
    "release_added",
    *BURSTS,
)
# Met only with the store on a PostgreSQL cluster of the soak's own.
STORE_KINDS = ("postgres_stopped",)
STORES = ("postgres", "duckdb")
# How long the store's PostgreSQL stays stopped: a restart by a service manager to a failover.
STORE_STOPPED_SECONDS = (5, 30)
# How long the release's files stay cut short before they are whole again: shorter than the import step's tries
# (STEP_RETRIES, STEP_RETRY_SECONDS: a minute), which a file that changed under the read is given.
TRUNCATED_SECONDS = (5, 30)
# How many places each sample release holds: the first, and each one published mid-soak.
RELEASE_ROWS = 200_000
# How long a burst of the object store's faults lasts: from a few throttled requests to an outage that outlasts the
# read's own tries (seconds) many times over.
BURST_SECONDS = (5, 60)
CATEGORIES = ("bakery", "cafe", "restaurant")
# The plan every account of the soak starts on, and the plan one is moved to as a fault: the smallest that still
# holds a campaign, or, for an account already within it, the free plan, which holds none.
FIRST_PLAN = "unlimited"
SMALLER_PLANS = ("starter", "free")
# How long the webserver (and the code server it starts) may take to answer: two shared cores, a busy daemon.
WEBSERVER_START_SECONDS = 180
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
# How long a fault that hits a run waits for one queued or running: the campaign added just before it is asked for
# at the import sensor's next tick (every 30 s) and its run then starts, which takes longer on loaded cores. A
# shorter wait missed the running import a cancel was for under a loaded full test run.
IN_FLIGHT_SECONDS = 120
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
    # The release a file of which was cut short, or that was published.
    release: str | None = None
    # The campaigns a move to a smaller plan paused, with the reason each was given.
    paused_by_plan: dict[int, str] = field(default_factory=dict)


@dataclass
class Releases:
    """The releases of the soak: those online (oldest first; the newest is the one imports read), those written
    and waiting to be published mid-soak, where each is on this machine, and the timers that will put back files
    cut short."""

    online: list[str]
    waiting: list[str] = field(default_factory=list)
    folders: dict[str, Path] = field(default_factory=dict)
    restores: list[threading.Timer] = field(default_factory=list)


@dataclass(frozen=True)
class ObjectStore:
    """The sample releases on a loopback S3 server: its s3:// root, read through the fault ``proxy``; a ``client``
    of the server itself and the latency proxy's ``copies`` of what it serves, to change the bucket under the
    readers."""

    root: str
    proxy: FaultProxy
    client: Any
    copies: LatencyProxy

    def files(self, release: str) -> list[str]:
        """The keys of the release's files in the bucket."""
        listed = self.client.list_objects_v2(Bucket=BUCKET, Prefix=f"{PREFIX}/{release}/")
        return [item["Key"] for item in listed.get("Contents", [])]

    def cut_short(self, release: str) -> Callable[[], None]:
        """Every file of ``release`` cut to its first half in place, as a copy interrupted half way or a disk that
        lost its tail leaves it; returns what puts them back whole."""
        whole = {key: self.client.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in self.files(release)}
        for key, data in whole.items():
            self._put(key, data[: len(data) // 2])

        def restore() -> None:
            for key, data in whole.items():
                self._put(key, data)

        return restore

    def publish(self, root: Path, release: str) -> None:
        """The release under the local ``root`` uploaded beside the others, as Overture publishes a new one."""
        for path in sorted((root / release).rglob("*.parquet")):
            self.client.upload_file(str(path), BUCKET, f"{PREFIX}/{path.relative_to(root).as_posix()}")

    def _put(self, key: str, data: bytes) -> None:
        self.client.put_object(Bucket=BUCKET, Key=key, Body=data)
        # The latency proxy answers range reads from its copy: without this, readers would never see the change.
        self.copies.forget(key.rsplit("/", 1)[-1])


def daemon_home(
    folder: Path,
    release_root: str,
    database: str | None = None,
    endpoint: str | None = None,
    instance_database: str | None = None,
) -> tuple[Path, dict[str, str]]:
    """A workspace of the code location in ``folder`` and the environment a daemon serving it runs with: a fresh
    DAGSTER_HOME holding the embedded default's dagster.yaml, the store ``database`` (default: a DuckDB file beside
    it), a release index beside it, and, for an s3:// ``release_root``, the S3-compatible ``endpoint`` to read it
    from, anonymously as Overture's bucket is read. With ``instance_database`` (a ``postgresql://`` URL), Dagster's
    own storage (runs, events, schedules) is there instead of SQLite files, as production's is."""
    home = folder / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT / "nakodo_dagster" / "data" / "dagster.yaml", home / "dagster.yaml")
    if instance_database:
        # SQLAlchemy 2.1 no longer picks psycopg2 for `postgresql://` (deploy/production/dagster.yaml says the same).
        url = instance_database.replace("postgresql://", "postgresql+psycopg2://", 1)
        with (home / "dagster.yaml").open("a") as config:
            config.write("\n" + yaml.safe_dump({"storage": {"postgres": {"postgres_url": url}}}))
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
    return _pairs_of(store.campaigns(active_only=True))


def _pairs_of(campaigns: Iterable[Campaign]) -> set[tuple[str, str]]:
    return {
        (area, category)
        for campaign in campaigns
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


def campaign_mismatches(store: Store, release_root: Path, elsewhere: Mapping[str, Path] | None = None) -> Counter:
    """Every active campaign's businesses against an independent reading of the release files under
    ``release_root`` (a release named in ``elsewhere``: under the folder it maps to) (bench.independent: pyarrow
    and WGS84 geodesics): the places, in the release each pair was
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
            for place in expected_rows((elsewhere or {}).get(release, release_root), release, run):
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
    dg.Failure's description, as places.failure_headline), else that step's error, else its run failure's, as the
    failure sensor keeps it (run monitoring's words for a worker that died; Dagster's and the exception's for a
    run that failed outside its steps); empty if none says."""
    steps = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
    runs = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    texts = [
        *(
            (failure.user_failure_data.description if failure.user_failure_data else None) or failure.error.message
            for failure in (record.event_log_entry.dagster_event.step_failure_data for record in steps)
        ),
        *(run_failure_headline(record.event_log_entry.dagster_event) for record in runs),
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
    for a DuckDB store), stopped and started again on demand; its object store (behind the fault proxy) and the
    releases on it."""

    def __init__(
        self,
        workspace: Path,
        environ: dict[str, str],
        folder: Path,
        remote: ObjectStore,
        releases: Releases,
        postgres: ThrowawayPostgres | None = None,
    ) -> None:
        self.workspace, self.environ, self.folder, self.remote, self.releases, self.postgres = (
            workspace,
            environ,
            folder,
            remote,
            releases,
            postgres,
        )
        self.starts = 0
        self._stack = contextlib.ExitStack()
        self.daemon: subprocess.Popen | None = None
        # The webserver's GraphQL API, once it answers.
        self.api: DagsterGraphQLClient | None = None

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

    def kill_code_server(self) -> int | None:
        """SIGKILL to the daemon's code server alone (the gRPC process serving the code location), the daemon, its
        fork server and run workers left running; its pid, or None if the daemon runs none at the moment (one killed
        before and not started again yet)."""
        assert self.daemon is not None
        children = psutil.Process(self.daemon.pid).children(recursive=True)
        servers = [child for child in children if _is_code_server(child)]
        for server in servers:
            with contextlib.suppress(psutil.NoSuchProcess):
                server.kill()
        return servers[0].pid if servers else None

    def stop(self) -> None:
        self._stack.close()

    def log_tail(self) -> str:
        return (self.folder / f"daemon_{self.starts}.log").read_text()[-3000:]


def _resume(store: Store, fault: Fault) -> None:
    """Resume the campaign a fault paused; one whose account has since moved to a plan without room for it stays
    paused, as its owner would find it."""
    with contextlib.suppress(InvalidInput):
        store.set_campaign_status(fault.campaign_id, "active")
    fault.recovered_at = time.time()


def _is_code_server(process: psutil.Process) -> bool:
    """Whether a process is a code server (``dagster api grpc`` or ``dagster code-server start``)."""
    with contextlib.suppress(psutil.Error):
        words = process.cmdline()
        return "grpc" in words or "code-server" in words
    return False


@contextlib.contextmanager
def running_webserver(workspace: Path, environ: dict[str, str], log: Path) -> Iterator[DagsterGraphQLClient]:
    """``dagster-webserver`` serving ``workspace`` on a free loopback port (with a code server of its own, as a
    deployment's webserver has), and a GraphQL client of it: the API a user or a script cancels a run through."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(port)]
    with log.open("w") as out:
        # A session of its own: the daemon's process group killed as a fault leaves it serving.
        server = subprocess.Popen(
            [*command, "-w", str(workspace)],
            env=environ,
            cwd=workspace.parent,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + WEBSERVER_START_SECONDS
        while not _serves(port):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"dagster-webserver did not answer; see {log}")
            time.sleep(0.5)
        yield DagsterGraphQLClient("127.0.0.1", port_number=port, timeout=60)
    finally:
        stop_group(server)


def _serves(port: int) -> bool:
    """Whether the webserver answers its server_info (it listens a moment before it does)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as answer:
            return answer.status == 200
    except OSError:
        return False


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
    when a cancel reaches a run that has written its pairs, or if there are none: a fault whose pairs no active
    campaign needs any more, its campaigns paused by a smaller plan, had nothing to bring back), or None if one has
    not."""
    wanted = set(pairs)
    if not wanted:
        return since
    # The rows of every area with every category: pairs of other runs among them.
    rows = store.import_rows({a for a, _ in wanted}, {c for _, c in wanted})
    landed = [
        row.imported_at.timestamp() for row in rows if (row.area, row.category) in wanted and row.release != REQUESTED
    ]
    if len(landed) < len(wanted):
        return None
    return max([*landed, since])


def _inject(
    kind: str,
    instance: dg.DagsterInstance,
    store: Store,
    fleet: Fleet,
    rng: random.Random,
    plans: dict[int, str],
) -> Fault | None:
    """One fault of ``kind``, or None when there was nothing for it to hit (no run queued, none running, no account
    left to move). ``plans`` is each account's plan, moved here when an account is."""
    if kind == "release_added":
        if not fleet.releases.waiting:
            return None
        name = fleet.releases.waiting.pop(0)
        at = time.time()
        fleet.remote.publish(fleet.releases.folders[name], name)
        # Imports read the newest release under the root (NAKODO_OVERTURE_RELEASE unset): the configured release
        # moves to this one.
        fleet.releases.online.append(name)
        return Fault(kind, at, release=name)
    if kind in ("daemon_killed", "code_server_killed", "postgres_stopped", "release_truncated", *BURSTS):
        # Once imports are running: a restart that hits nothing in flight proves little. A burst once an import is
        # queued: a run reads the release in its first seconds, so the burst meets the next one's read.
        wanted = dg.DagsterRunStatus.QUEUED if kind in (*BURSTS, "release_truncated") else dg.DagsterRunStatus.STARTED
        with contextlib.suppress(RuntimeError):
            _wait(f"an import run {wanted.value}", IN_FLIGHT_SECONDS, lambda: import_runs(instance, [wanted]), fleet)
        in_flight = [pair for run in import_runs(instance, [dg.DagsterRunStatus.STARTED]) for pair in run_pairs(run)]
        at = time.time()
        if kind == "postgres_stopped":
            seconds = round(rng.uniform(*STORE_STOPPED_SECONDS), 1)
            fleet.stop_store(seconds)
            return Fault(kind, at, pairs=in_flight, seconds=seconds)
        if kind in BURSTS:
            # Left to run its course while the schedule goes on: an object store's trouble does not wait its turn.
            seconds = round(rng.uniform(*BURST_SECONDS), 1)
            return Fault(kind, at, pairs=in_flight, seconds=seconds, rule=fleet.remote.proxy.add(burst(kind, seconds)))
        if kind == "release_truncated":
            # Left to run its course while the schedule goes on, as a burst is.
            seconds = round(rng.uniform(*TRUNCATED_SECONDS), 1)
            restore = threading.Timer(seconds, fleet.remote.cut_short(fleet.releases.online[-1]))
            restore.start()
            fleet.releases.restores.append(restore)
            return Fault(kind, at, pairs=in_flight, seconds=seconds, release=fleet.releases.online[-1])
        if kind == "code_server_killed":
            return Fault(kind, at, pairs=in_flight) if fleet.kill_code_server() else None
        fleet.kill()
        # Started again at once, as Kubernetes or a service manager does.
        fleet.start()
        return Fault(kind, at, pairs=in_flight)
    if kind == "campaign_paused":
        # A campaign whose account's plan has room to resume it.
        campaigns = [c for c in store.campaigns(active_only=True) if plans.get(c.account_id) == FIRST_PLAN]
        if not campaigns:
            return None
        campaign = rng.choice(campaigns)
        store.set_campaign_status(campaign.id, "paused")
        return Fault(kind, time.time(), campaign_id=campaign.id)
    if kind == "plan_downgraded":
        return _downgrade(store, plans)
    wanted = dg.DagsterRunStatus.QUEUED if kind == "cancelled_queued" else dg.DagsterRunStatus.STARTED
    with contextlib.suppress(RuntimeError):
        _wait(f"an import run {wanted.value}", IN_FLIGHT_SECONDS, lambda: import_runs(instance, [wanted]), fleet)
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
        # Through Dagster's GraphQL API, as the UI's Terminate button or a script does: the webserver's terminateRun
        # cancels a queued run in the queue and asks a running one's launcher to stop it.
        assert fleet.api is not None
        try:
            fleet.api.terminate_run(run.run_id)
        except DagsterGraphQLClientError:
            # It ended between being picked and the call: nothing was cancelled.
            return None
    return Fault(kind, time.time(), run_id=run.run_id, pairs=run_pairs(run))


def _downgrade(store: Store, plans: dict[int, str]) -> Fault | None:
    """The account with the most active campaigns moved to a smaller plan: its newest campaigns beyond the plan are
    paused by the store, each with its reason. One account always stays on the first plan, for later campaigns."""
    movable = {
        account: store.account_usage(account).usage.campaigns for account, plan in plans.items() if plan == FIRST_PLAN
    }
    if len(movable) < 2:
        return None
    account = max(movable, key=lambda a: (movable[a], -a))
    smaller = plan_named(SMALLER_PLANS[0])
    plan = (
        SMALLER_PLANS[0] if smaller.campaigns is not None and movable[account] > smaller.campaigns else SMALLER_PLANS[1]
    )
    at = time.time()
    paused = store.set_account_plan(account, plan)
    plans[account] = plan
    return Fault("plan_downgraded", at, paused_by_plan=paused, recovered_at=time.time())


def _first_tick_after(instance: dg.DagsterInstance, sensor: str, at: float) -> float | None:
    """When ``sensor`` first ticked without failing after ``at`` (seconds since the epoch), or None."""
    states = instance.all_instigator_state(instigator_type=InstigatorType.SENSOR)
    ticks = [
        tick.timestamp
        for state in states
        if state.name == sensor
        for tick in instance.get_ticks(
            state.instigator_origin_id, state.selector_id, after=at, statuses=[TickStatus.SUCCESS, TickStatus.SKIPPED]
        )
    ]
    return min(ticks, default=None)


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
    if fault.kind in ("campaign_paused", "plan_downgraded"):
        return fault.recovered_at
    if fault.kind == "release_added":
        if (first := _first_landed_from(store, fault.release)) is not None:
            return first
        # No import started after it (nothing was left to read): nothing had to move to it.
        records = instance.get_run_records(dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}))
        return None if any(r.start_time and r.start_time > fault.at for r in records) else fault.at
    if fault.kind == "code_server_killed":
        # The daemon's sensors run in its code server: back once the import sensor ticks again, and what was in
        # flight (its workers are the fork server's, not the code server's) has landed.
        ticked = _first_tick_after(instance, import_sensor.name, fault.at)
        landed = _landed_at(store, _needed_of(fault, store), fault.at)
        return None if ticked is None or landed is None else max(ticked, landed)
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


def _needed_of(fault: Fault, store: Store) -> list[tuple[str, str]]:
    """The pairs ``fault`` hit that an active campaign still needs."""
    needed = needed_pairs(store)
    return [pair for pair in fault.pairs if pair in needed]


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
        (
            results["pairs_explained_by_plan"]["failed"],
            "pairs of campaigns paused by plan marked failed for a fault a retry could fix",
        ),
        (results["campaigns_paused_by_plan_unexplained"], "campaigns a smaller plan paused without a plain reason"),
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


def _first_landed_from(store: Store, release: str | None) -> float | None:
    """When the first pair read from ``release`` landed (seconds since the epoch), or None if none has."""
    [(first,)] = store._transact(
        lambda tx: tx.rows("SELECT min(imported_at) FROM place_imports WHERE release = $release", release=release)
    )
    return first.timestamp() if first else None


def _fresh_by_release(store: Store, pairs: set[tuple[str, str]]) -> Counter:
    """How many of these pairs hold each release."""
    rows = store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})
    return Counter(row.release for row in rows if (row.area, row.category) in pairs and row.release != REQUESTED)


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
    accounts: int = 1,
    kinds: tuple[str, ...] | None = None,
    instance_database: str | None = None,
) -> dict:
    """Run the soak in ``folder``, reading the releases under ``release_root`` from ``remote``, its store on
    ``postgres`` (a DuckDB file in ``folder`` if None), and return its figures and invariants."""
    rng = random.Random(seed)
    workspace, environ = daemon_home(
        folder, remote.root, postgres.url if postgres else None, remote.proxy.endpoint, instance_database
    )
    store = open_store(environ["NAKODO_DATABASE"])
    store.migrate()
    targetings = _campaigns(rng, campaigns)
    # Campaigns spread over accounts on the first plan, for a move to a smaller plan to pause some of them.
    plans = {store.add_account(f"soak {number}", FIRST_PLAN): FIRST_PLAN for number in range(accounts)}
    # Each kind in turn, in a seeded order, so that every kind is met several times in a long soak.
    met = [kind for kind in KINDS + (STORE_KINDS if postgres else ()) if kinds is None or kind in kinds]
    chosen = [met[number % len(met)] for number in range(faults)]
    rng.shuffle(chosen)
    schedule = [(rng.uniform(2, 15), kind) for kind in chosen]
    # The releases published mid-soak, written before it starts: writing one takes the machine for a while.
    online = list_releases(release_root)
    releases = Releases(online)
    for number in range(1, chosen.count("release_added") + 1):
        day, patch = online[-1].split(".")
        name = f"{day}.{int(patch) + number}"
        write_sample_release(folder / "published", release=name, rows=RELEASE_ROWS, seed=seed + number, progress=False)
        releases.waiting.append(name)
        releases.folders[name] = folder / "published"
    fleet = Fleet(workspace, environ, folder, remote, releases, postgres)
    injected: list[Fault] = []
    with dg.DagsterInstance.from_config(str(environ["DAGSTER_HOME"])) as instance, contextlib.ExitStack() as webserver:
        # The instance's storage is made before the daemon and its code server start (see bench.daemon).
        instance.get_runs_count()
        started, soak_started = time.monotonic(), time.time()
        fleet.start()
        try:
            fleet.api = webserver.enter_context(running_webserver(workspace, environ, folder / "webserver.log"))
            # Campaigns arrive in waves, one before each fault, so that every fault meets imports in flight.
            waves = [targetings[number :: faults + 1] for number in range(faults + 1)]
            added = itertools.count()

            def add(targeting: Targeting) -> None:
                # In turn to the accounts still on the first plan: a smaller plan has no room for them.
                number = next(added)
                owners = sorted(account for account, plan in plans.items() if plan == FIRST_PLAN)
                store.add_campaign(f"soak {number}", targeting, account_id=owners[number % len(owners)])

            for targeting in waves[0]:
                add(targeting)
            _wait("the first import run to start", STUCK_SECONDS, lambda: import_runs(instance), fleet)
            paused: list[Fault] = []
            for (gap, kind), wave in zip(schedule, waves[1:], strict=True):
                for targeting in wave:
                    add(targeting)
                time.sleep(gap)
                for fault in [f for f in paused if time.time() - f.at >= PAUSE_SECONDS]:
                    _resume(store, fault)
                    paused.remove(fault)
                fault = _inject(kind, instance, store, fleet, rng, plans)
                if fault is not None:
                    injected.append(fault)
                    paused += [fault] if kind == "campaign_paused" else []
            for fault in paused:
                _resume(store, fault)
            for restore in releases.restores:
                restore.join()
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
            paused_by_plan = {c.id: c for c in store.campaigns() if c.status != "active" and c.paused_reason}
            explained = _pairs_of(paused_by_plan.values()) - needed
            explained_states = pair_states(store, explained)
            waits = _first_business_waits(store)
            runs = import_runs(instance)
            results = {
                "seed": seed,
                "store": "postgres" if postgres else "duckdb",
                "instance": "postgres" if instance_database else "sqlite",
                "accounts": accounts,
                "campaigns": campaigns,
                "pairs_needed": len(needed),
                "pairs_fresh": states["fresh"],
                "pairs_marked_failed": states["failed"],
                "pairs_lost": len(needed) - states["fresh"],
                "orphan_marks": _orphan_marks(instance, store, needed | explained),
                "campaigns_paused_by_plan": len(paused_by_plan),
                # Needed only by campaigns a smaller plan paused: explained (paused, over plan), never failed.
                "pairs_explained_by_plan": {state: explained_states[state] for state in PAIR_STATES},
                "campaigns_paused_by_plan_unexplained": sum(
                    campaign not in paused_by_plan or not is_plain(paused_by_plan[campaign].paused_reason)
                    for fault in injected
                    for campaign in fault.paused_by_plan
                ),
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
                "campaign_businesses": dict(campaign_mismatches(store, Path(release_root), releases.folders)),
                "releases": releases.online,
                "pairs_fresh_by_release": dict(_fresh_by_release(store, needed)),
                "failed_import_runs": failed_run_headlines(instance),
                # What a broken invariant is read against: each needed pair marked failed with its reason, and each
                # fault with when it came (seconds into the soak), what it hit and when the fleet was back.
                "failed_marks": {
                    f"{row.area} {row.category}": row.failure
                    for row in store.import_rows({a for a, _ in needed}, {c for _, c in needed})
                    if row.failure and (row.area, row.category) in needed
                },
                "fault_timeline": [
                    {
                        "kind": fault.kind,
                        "at_s": round(fault.at - soak_started, 1),
                        "pairs": [" ".join(pair) for pair in fault.pairs],
                        "back_after_s": None if fault.recovered_at is None else round(fault.recovered_at - fault.at, 1),
                    }
                    for fault in injected
                ],
                "campaigns_with_businesses": len(waits),
                "longest_wait_for_first_businesses_seconds": round(max(waits, default=0), 1),
                "seconds": round(landed - started, 1),
                "load_average": os.getloadavg()[0],
            }
            results["invariants_broken"] = broken_invariants(results)
        finally:
            for restore in releases.restores:
                restore.join()
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
            yield ObjectStore(root, proxy, s3_client(*upstream), copies)
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


def measure_faults(
    release_root: str | None,
    seed: int,
    campaigns: int,
    faults: int,
    store: str = "postgres",
    accounts: int = 1,
    kinds: tuple[str, ...] | None = None,
) -> dict:
    """The soak on a fresh folder (and a sample release written there unless ``release_root`` is given), read from
    a loopback S3 server through the fault proxy, its store on a PostgreSQL cluster of its own (``store``
    postgres, which then holds Dagster's own storage too, so that stopping it breaks both) or in a DuckDB file
    (duckdb, Dagster's storage in SQLite files), its campaigns spread over ``accounts``, its faults of ``kinds``
    (default: every kind)."""
    with (
        _release(release_root) as root,
        _object_store(root) as remote,
        tempfile.TemporaryDirectory(prefix="nakodo-soak-") as folder,
        _store_server(store) as postgres,
    ):
        # Dagster's own storage beside the store's, on the cluster the soak stops: both lose their connections.
        instance_database = postgres.create_database("dagster") if postgres else None
        return soak(root, remote, seed, campaigns, faults, Path(folder), postgres, accounts, kinds, instance_database)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    parser.add_argument("--seed", type=int, default=40, help="seed of the campaigns and the faults' schedule")
    parser.add_argument("--campaigns", type=int, default=300, help="campaigns over the sample release (default 300)")
    parser.add_argument("--accounts", type=int, default=6, help="accounts the campaigns are spread over (default 6)")
    # Two of each of the thirteen kinds (the cluster stopped among them).
    parser.add_argument("--faults", type=int, default=26, help="faults to inject (default 26)")
    parser.add_argument(
        "--kinds",
        type=lambda text: tuple(text.split(",")),
        help=f"the kinds of fault to inject, comma-separated (default: all of {', '.join(KINDS + STORE_KINDS)})",
    )
    parser.add_argument(
        "--release-root",
        help="a folder of releases, served from a loopback S3 server (default: a sample release written here)",
    )
    parser.add_argument(
        "--store",
        choices=STORES,
        default=STORES[0],
        help="the store and Dagster's storage: a PostgreSQL cluster the soak starts on a free port and stops for a "
        "while as a fault (default), or a DuckDB file and SQLite",
    )
    args = parser.parse_args(argv)
    unknown = set(args.kinds or ()) - set(KINDS + STORE_KINDS)
    if unknown:
        parser.error(f"unknown kinds of fault: {', '.join(sorted(unknown))}")
    # moto's server logs every request it answers: thousands of lines that bury the soak's own.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    figures = measure_faults(
        args.release_root, args.seed, args.campaigns, args.faults, args.store, args.accounts, args.kinds
    )
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
