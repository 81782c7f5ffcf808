"""The soak's run: campaigns in waves over several accounts, a fault between waves on a seeded schedule, then its
figures and invariants; ``measure_faults``, the same on a fresh folder, release, object store and store."""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import dagster as dg

from bench.faults.checks import (
    broken_invariants,
    campaign_mismatches,
    coverage_against_recount,
    failed_marks,
    failed_run_headlines,
    first_business_waits,
    fresh_by_release,
    is_plain,
    needed_pairs,
    orphan_marks,
    pair_states,
    pairs_of,
    searches_caught_up,
)
from bench.faults.fleet import (
    Fleet,
    ObjectStore,
    Releases,
    daemon_home,
    object_store,
    running_webserver,
    store_server,
    wait_for,
)
from bench.faults.inject import (
    FIRST_PLAN,
    KINDS,
    STORE_KINDS,
    Fault,
    inject_fault,
    resume_campaign,
    retry_replaced_files,
)
from bench.faults.recovery import recovery_time
from bench.faults.runs import (
    UNFINISHED,
    import_runs,
    most_at_once,
    pairs_imported_twice_at_once,
    run_spans,
    slots_held_by_ended_runs,
)
from bench.throwaway_postgres import ThrowawayPostgres
from nakodo_dagster.dagster_internals import AUTO_RETRY_RUN_ID_TAG
from nakodo_dagster.overture.releases import list_releases
from nakodo_dagster.overture.sample import CITIES, write_sample_release
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.store import open_store
from nakodo_dagster.store.models import PAIR_STATES

STORES = ("postgres", "duckdb")
# How many places each sample release holds: the first, and each one published mid-soak.
RELEASE_ROWS = 200_000
CATEGORIES = ("bakery", "cafe", "restaurant")
RADII_KM = (2, 5, 10)
# Campaigns within this of one of the sample release's cities, where its places are.
OFFSET_DEGREES = 0.3
# How long the fleet may take to come back after a fault before the soak calls it stuck: slots of a killed run are
# freed 75 s after it ended (dagster.yaml), then run monitoring's next look (30 s), then the import sensor's (30 s).
STUCK_SECONDS = 300
# A campaign paused this long while its imports run, then resumed.
PAUSE_SECONDS = 20
# After the last pair landed: the search sensor's next look (30 s), a pair visible once COMMIT_OVERLAP (1 minute)
# older than the search before, and the search run.
SEARCH_CATCH_UP_SECONDS = 240


def _campaigns(rng: random.Random, count: int) -> list[Targeting]:
    targetings = []
    for _ in range(count):
        city = rng.choice(CITIES)
        lat = round(min(89.0, max(-89.0, city.lat + rng.uniform(-OFFSET_DEGREES, OFFSET_DEGREES))), 4)
        lng = round(min(180.0, max(-180.0, city.lng + rng.uniform(-OFFSET_DEGREES, OFFSET_DEGREES))), 4)
        categories = tuple(sorted(rng.sample(CATEGORIES, rng.randint(1, 2))))
        targetings.append(Targeting((PointLocation(lat, lng, rng.choice(RADII_KM)),), categories))
    return targetings


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
            wait_for("the first import run to start", STUCK_SECONDS, lambda: import_runs(instance), fleet)
            paused: list[Fault] = []
            for (gap, kind), wave in zip(schedule, waves[1:], strict=True):
                for targeting in wave:
                    add(targeting)
                time.sleep(gap)
                for fault in [f for f in paused if time.time() - f.at >= PAUSE_SECONDS]:
                    resume_campaign(store, fault)
                    paused.remove(fault)
                fault = inject_fault(kind, instance, store, fleet, rng, plans)
                if fault is not None:
                    injected.append(fault)
                    paused += [fault] if kind == "campaign_paused" else []
            for fault in paused:
                resume_campaign(store, fault)
            for restore in releases.restores:
                restore.join()
            needed = needed_pairs(store)

            def wait_for_landing() -> None:
                wait_for(
                    "every needed pair to land",
                    STUCK_SECONDS + 60 * len(targetings),
                    lambda: (
                        set(pair_states(store, needed)) <= {"fresh", "failed"} and not import_runs(instance, UNFINISHED)
                    ),
                    fleet,
                )

            wait_for_landing()
            # A file unreadable when its import began is not tried again (another try reads the same bytes): the
            # failure tells the operator to replace it and retry, and the operator here does, its copy put back.
            if retry_replaced_files(store, needed):
                wait_for_landing()
            landed = time.monotonic()
            # A search that never catches up is what the check of the campaigns' businesses reports.
            with contextlib.suppress(RuntimeError):
                wait_for(
                    "every campaign searched since its pairs landed",
                    SEARCH_CATCH_UP_SECONDS,
                    lambda: searches_caught_up(instance, store),
                    fleet,
                )
            # The slots of a run killed last are freed 75 s after it ended.
            with contextlib.suppress(RuntimeError):
                wait_for("no slot held by a run that ended", 150, lambda: not slots_held_by_ended_runs(instance), fleet)
            for fault in injected:
                if (at := recovery_time(fault, instance, store)) is not None:
                    fault.recovered_at = at
            spans = run_spans(instance)
            states = pair_states(store, needed)
            paused_by_plan = {c.id: c for c in store.campaigns() if c.status != "active" and c.paused_reason}
            explained = pairs_of(paused_by_plan.values()) - needed
            explained_states = pair_states(store, explained)
            waits = first_business_waits(store)
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
                "orphan_marks": orphan_marks(instance, store, needed | explained),
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
                "max_import_runs_at_once": most_at_once(spans),
                "pairs_imported_by_two_runs_at_once": pairs_imported_twice_at_once(spans),
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
                "pairs_fresh_by_release": dict(fresh_by_release(store, needed)),
                "failed_import_runs": failed_run_headlines(instance),
                # What a broken invariant is read against: each needed pair marked failed with its reason, and each
                # fault with when it came (seconds into the soak), what it hit and when the fleet was back.
                "failed_marks": failed_marks(store, needed),
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
        object_store(root) as remote,
        tempfile.TemporaryDirectory(prefix="nakodo-soak-") as folder,
        store_server(store) as postgres,
    ):
        # Dagster's own storage beside the store's, on the cluster the soak stops: both lose their connections.
        instance_database = postgres.create_database("dagster") if postgres else None
        return soak(root, remote, seed, campaigns, faults, Path(folder), postgres, accounts, kinds, instance_database)
