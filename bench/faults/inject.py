"""The kinds of fault the soak injects and how each is made: a process killed, a run cancelled, a campaign paused and
resumed, an account moved to a smaller plan, the store's cluster stopped, a burst at the object store, a release cut
short or published."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dagster as dg
from dagster_graphql import DagsterGraphQLClientError

from bench.fault_proxy import BURSTS, Rule, burst
from bench.faults.checks import import_rows_of
from bench.faults.fleet import Fleet, wait_for
from bench.faults.runs import import_runs, run_pairs
from nakodo_dagster import tags
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.plan_config import plan_named
from nakodo_dagster.store import Store

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
# How long the store's PostgreSQL stays stopped: a restart by a service manager to a failover.
STORE_STOPPED_SECONDS = (5, 30)
# How long the release's files stay cut short before they are whole again: shorter than the import step's tries
# (STEP_RETRIES, STEP_RETRY_SECONDS: a minute), which a file that changed under the read is given.
TRUNCATED_SECONDS = (5, 30)
# How long a burst of the object store's faults lasts: from a few throttled requests to an outage that outlasts the
# read's own tries (seconds) many times over.
BURST_SECONDS = (5, 60)
# The plan every account of the soak starts on, and the plan one is moved to as a fault: the smallest that still
# holds a campaign, or, for an account already within it, the free plan, which holds none.
FIRST_PLAN = "unlimited"
SMALLER_PLANS = ("starter", "free")
# How long a fault that hits a run waits for one queued or running: the campaign added just before it is asked for
# at the import sensor's next tick (every 30 s) and its run then starts, which takes longer on loaded cores. A
# shorter wait missed the running import a cancel was for under a loaded full test run.
IN_FLIGHT_SECONDS = 120


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


def resume_campaign(store: Store, fault: Fault) -> None:
    """Resume the campaign a fault paused; one whose account has since moved to a plan without room for it stays
    paused, as its owner would find it."""
    with contextlib.suppress(InvalidInput):
        store.set_campaign_status(fault.campaign_id, "active")
    fault.recovered_at = time.time()


def retry_replaced_files(store: Store, pairs: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """What an operator does after the failure of an import that read a file cut short, once the file is whole
    again (its copy put back): retries each of these pairs marked failed for an unreadable file. Returns them."""
    now = datetime.now(UTC)
    retried = [
        (row.area, row.category) for row in import_rows_of(store, pairs) if " is unreadable" in (row.failure or "")
    ]
    for area, category in retried:
        store.forget_failed_import(area, category, now)
    return retried


def inject_fault(
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
            wait_for(f"an import run {wanted.value}", IN_FLIGHT_SECONDS, lambda: import_runs(instance, [wanted]), fleet)
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

    def targets() -> list[dg.DagsterRun]:
        runs = import_runs(instance, [wanted])
        return [run for run in runs if tags.RUN_WORKER_PID in run.tags] if kind == "worker_killed" else runs

    # On a quiet machine an import may end between being picked and being hit: another is looked for, until the
    # window closes.
    deadline = time.monotonic() + IN_FLIGHT_SECONDS
    while (left := deadline - time.monotonic()) > 0:
        with contextlib.suppress(RuntimeError):
            wait_for(f"an import run {wanted.value}", left, targets, fleet)
        if not (runs := targets()):
            continue
        run = rng.choice(runs)
        if kind == "worker_killed":
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(run.tags[tags.RUN_WORKER_PID]), signal.SIGKILL)
        else:
            # Through Dagster's GraphQL API, as the UI's Terminate button or a script does: the webserver's
            # terminateRun cancels a queued run in the queue and asks a running one's launcher to stop it.
            assert fleet.api is not None
            try:
                fleet.api.terminate_run(run.run_id)
            except DagsterGraphQLClientError:
                continue
        return Fault(kind, time.time(), run_id=run.run_id, pairs=run_pairs(run))
    return None


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
