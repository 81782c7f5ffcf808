"""The fleet soak: the code location's three sensors ticking in the daemon's order (import, search, coverage, then
again) on a simulated clock, over a store of many campaigns and accounts, while something changes before every
tick, as it does in production.

The sensors, their resources, the store and the Dagster instance are the real ones; what the daemon would hand to
other processes is played here, at the pace measured for it: import runs leave the queue two at a time at
``pace`` runs an hour, highest ``dagster/priority`` first, and land their pairs in the store with a few places
each (the store's own write; a share fail and are marked failed with a reason, as the failure sensor does); the
search runs the search sensor asks for search their campaigns with the store's own search. Between rounds the
clock moves on by the sensors' interval.

Phases: a cold start, a steady stretch while imports land, a burst of new campaigns with pauses, resumes and an
account moved to a smaller plan, the next day's first searches, and a new release 35 days on, when every loaded
pair is due again. On PostgreSQL, autovacuum is off for the store's tables and the planner's statistics are taken
at the cold start, when no pair has been asked for; after that only the sensors' ticks take them, as they do for a
table written to beyond autovacuum's rule (``Store.keep_statistics``).

``python -m bench.soak`` prints the figures as JSON; ``--campaigns 100000`` for the big fleet.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import psycopg2
import pyarrow as pa
import time_machine
from tqdm import tqdm

from bench.policy import (
    CATEGORIES_PER_CAMPAIGN,
    SENSORS,
    TICK_INTERVAL_S,
    evaluate,
    kept_template,
    launch,
    scratch_database,
)
from nakodo_dagster import tags
from nakodo_dagster.imports.run import run_stamp
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job, searched_campaign_ids
from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.overture.sample import TAXONOMY, write_sample_release
from nakodo_dagster.placement import FRESH_DAYS, ImportRun, PointLocation, Targeting, parse_area_key
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import Store, Transaction, open_store

RADIUS_KM = 200
# Campaigns' categories are drawn from the first 20 of the sample's taxonomy.
CATEGORY_CHOICES = 20
# An account holds this many campaigns; every fifth is on the pro plan and holds fewer.
CAMPAIGNS_PER_ACCOUNT = 100
PRO_CAMPAIGNS = 20
# Block runs an hour, two at a time: the embedded default's measured pace on PostgreSQL's instance (bench/daemon).
PACE = 1_500
FAILED_SHARE = 0.05
PLACES_PER_PAIR = 2
# A search run's pace: 10 campaigns a second, so that a batch of 10,000 ends within the 30 minutes the search
# sensor waits for it (and the soak's rounds stay seconds long).
SEARCHES_PER_ROUND = 300
_RECOUNTED = re.compile(r"([\d,]+) (?:campaign areas|of [\d,]+ pairs) recounted|recounted ([\d,]+)")


@dataclass(frozen=True)
class Phase:
    """A stretch of rounds: what happens before it, and how many rounds it lasts."""

    name: str
    rounds: int


PHASES = (
    Phase("cold start", 3),
    Phase("steady, imports landing", 40),
    Phase("after a burst of new campaigns", 20),
    Phase("next day", 10),
    Phase("new release, 35 days on", 20),
)


def fleet(count: int, seed: int) -> list[Targeting]:
    """``count`` campaigns of one 200 km circle each between 50 S and 65 N, 5 categories of 20."""
    rng = np.random.default_rng(seed)
    names = [c.primary for c in TAXONOMY[:CATEGORY_CHOICES]]
    return [
        Targeting(
            (PointLocation(float(rng.uniform(-50, 65)), float(rng.uniform(-180, 180)), RADIUS_KM),),
            tuple(sorted(rng.choice(names, size=CATEGORIES_PER_CAMPAIGN, replace=False).tolist())),
        )
        for _ in range(count)
    ]


def fleet_accounts(store: Store, campaigns: int, first_account: int = 0) -> list[int]:
    """Accounts for ``campaigns`` campaigns, CAMPAIGNS_PER_ACCOUNT each (every fifth account on pro, with
    PRO_CAMPAIGNS): the account of each campaign, in order."""
    owners: list[int] = []
    number = first_account
    while len(owners) < campaigns:
        pro = number % 5 == 4
        account = store.add_account(f"account {number}", "pro" if pro else "unlimited")
        owners += [account] * min(PRO_CAMPAIGNS if pro else CAMPAIGNS_PER_ACCOUNT, campaigns - len(owners))
        number += 1
    return owners


def fleet_names(owners: list[int]) -> list[str]:
    """The campaigns' names: each account's campaigns counted from 0, ``account 7 campaign 3``."""
    counts: dict[int, int] = {}
    names = []
    for account in owners:
        counts[account] = counts.get(account, -1) + 1
        names.append(f"account {account} campaign {counts[account]}")
    return names


def seed_fleet(store: Store, campaigns: list[Targeting], first_account: int = 0) -> None:
    """Add the campaigns through the store as users do, in the accounts of ``fleet_accounts``: each in a
    transaction of its own, the DuckDB file held open for them all (a thousand opens took a quarter of an hour)."""
    with store.held():
        owners = fleet_accounts(store, len(campaigns), first_account)
        for targeting, account, name in zip(campaigns, owners, fleet_names(owners), strict=True):
            store.add_campaign(name, targeting, account_id=account)


def soak_template(admin_url: str, campaigns: int, seed: int) -> str:
    """A PostgreSQL database holding the soak's fleet (``policy.kept_template``)."""

    def fill(url: str) -> None:
        store = open_store(url)
        store.migrate()
        seed_fleet(store, fleet(campaigns, seed))

    return kept_template(admin_url, f"nakodo_bench_soak_{campaigns}_{seed}", fill)[0]


def worst_statistics(database: str) -> None:
    """Autovacuum off for the store's tables, and their statistics taken now, before any pair is asked for: what
    the planner knows at the worst moment, kept for the whole soak."""
    connection = psycopg2.connect(database)
    connection.autocommit = True
    try:
        with connection.cursor() as cursor:
            # Every table of the store, a partitioned table's partitions rather than their parent.
            cursor.execute("SELECT relname FROM pg_class WHERE relkind = 'r' AND relnamespace = 'public'::regnamespace")
            for (table,) in cursor.fetchall():
                cursor.execute(f'ALTER TABLE "{table}" SET (autovacuum_enabled = false)')
            cursor.execute("ANALYZE")
    finally:
        connection.close()


def places_of(run: ImportRun, release: str) -> pa.Table:
    """PLACES_PER_PAIR places in each of the run's pairs, at its area's centre: the pairs land with something to
    find, and every search has businesses to add."""
    rows = []
    for area, category in run.pairs:
        west, south, east, north = parse_area_key(area).bbox
        for number in range(PLACES_PER_PAIR):
            rows.append(
                {
                    "id": f"{release}:{area}:{category}:{number}",
                    "name": f"{category} {number}",
                    "category": category,
                    "lat": (south + north) / 2,
                    "lng": (west + east) / 2,
                    "confidence": 0.9,
                    "address": None,
                    "country": None,
                    "websites": [],
                    "phones": [],
                    "area": area,
                }
            )
    return pa.Table.from_pylist(rows, schema=PLACES_SCHEMA)


def _report(
    instance: dg.DagsterInstance, run: dg.DagsterRun, event_type: dg.DagsterEventType, at: float | None = None
) -> None:
    """A run's start or end as its worker reports it, at ``at`` (a timestamp; now if None)."""
    event = dg.DagsterEvent(event_type.value, job_name=run.job_name)
    instance.report_dagster_event(event, run_id=run.run_id, timestamp=at)


@dataclass
class Tick:
    phase: str
    round: int
    sensor: str
    seconds: float
    recounted: int | None
    runs: int
    message: str
    slowest_statement: str
    slowest_statement_s: float


class StatementClock:
    """How long each of the store's statements took while it is on, by the statement's first words: which
    statement dominates a tick."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def on(self) -> Iterator[None]:
        run = Transaction.run
        self.seconds = {}

        def timed(transaction: Transaction, statement: str, **params: object) -> None:
            started = time.perf_counter()
            try:
                run(transaction, statement, **params)
            finally:
                words = " ".join(statement.split())[:60]
                self.seconds[words] = self.seconds.get(words, 0.0) + time.perf_counter() - started

        Transaction.run = timed
        try:
            yield
        finally:
            Transaction.run = run

    def slowest(self) -> tuple[str, float]:
        return max(self.seconds.items(), key=lambda item: item[1], default=("", 0.0))


IMPORT_WRITE = "import write"
SEARCH = "search"


@dataclass
class Fleet:
    """The store, the instance and the simulated daemon around them."""

    store: Store
    instance: dg.DagsterInstance
    resources: dict
    release: str
    seed: int
    cursors: dict[str, str | None] = field(default_factory=lambda: dict.fromkeys(SENSORS))
    served: float = 0.0
    ticks: list[Tick] = field(default_factory=list)
    imports: dict[str, int] = field(default_factory=lambda: {"landed": 0, "failed": 0})
    searches: int = 0
    searching: list[tuple[dg.DagsterRun, list[int]]] = field(default_factory=list)
    """Search runs under way and the campaigns each has still to search."""
    statements: StatementClock = field(default_factory=StatementClock)
    work: list[tuple[str, str, float]] = field(default_factory=list)
    """What the runs did between ticks, each piece timed: (phase, "import write" or "search", seconds)."""

    def round(self, phase: str, number: int) -> None:
        """Each sensor once, in the daemon's order, each tick's requests carried out as the daemon would."""
        for name, sensor in SENSORS.items():
            with self.statements.on():
                figures, data = evaluate(sensor, self.instance, self.resources, self.cursors[name])
            launch(self.instance, sensor, data)
            self.cursors[name] = data.cursor
            text = " ".join([figures["skip_message"] or "", *figures["log"]])
            found = _RECOUNTED.search(text)
            recounted = int((found[1] or found[2]).replace(",", "")) if found else None
            self.ticks.append(
                Tick(
                    phase,
                    number,
                    name,
                    figures["seconds"],
                    recounted,
                    figures["runs_requested"],
                    text[:300],
                    *self.statements.slowest(),
                )
            )

    def serve(self, seconds: float, phase: str) -> None:
        """What the queue gets through in ``seconds``: import runs at PACE (highest priority, then oldest), and
        search runs at SEARCHES_PER_ROUND campaigns a round, oldest run first; each write and search timed."""
        queued = self.instance.get_runs(
            dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}, statuses=[dg.DagsterRunStatus.NOT_STARTED])
        )
        # get_runs lists the newest first.
        queued = sorted(reversed(queued), key=lambda run: -int(run.tags.get(tags.PRIORITY, "0")))
        self.served += PACE * seconds / 3600
        done = min(len(queued), math.floor(self.served))
        self.served -= done
        rng = np.random.default_rng(self.seed + len(self.ticks))
        # Spread over the interval, two at a time, so that the import sensor judges the pace it would observe.
        ended = time.time() - seconds
        for run in queued[:done]:
            started, ended = ended, ended + seconds / done
            _report(self.instance, run, dg.DagsterEventType.RUN_START, started)
            payload = ImportRun.from_payload(import_payload(run.run_config))
            stamp = run_stamp(run)
            if rng.random() < FAILED_SHARE:
                self.store.mark_failed(payload.pairs, stamp, datetime.now(UTC), "the soak's share of failed imports")
                _report(self.instance, run, dg.DagsterEventType.RUN_FAILURE, ended)
                self.imports["failed"] += 1
            else:
                places = places_of(payload, self.release)
                started = time.perf_counter()
                self.store.write_import(payload, self.release, places, stamp=stamp)
                self.work.append((phase, IMPORT_WRITE, time.perf_counter() - started))
                _report(self.instance, run, dg.DagsterEventType.RUN_SUCCESS, ended)
                self.imports["landed"] += 1
        for run in reversed(
            self.instance.get_runs(
                dg.RunsFilter(job_name=search_campaigns_job.name, statuses=[dg.DagsterRunStatus.NOT_STARTED])
            )
        ):
            _report(self.instance, run, dg.DagsterEventType.RUN_START)
            self.searching.append((run, list(searched_campaign_ids(run.run_config))))
        budget = SEARCHES_PER_ROUND
        while self.searching and budget:
            run, campaigns = self.searching[0]
            batch = campaigns[:budget]
            del campaigns[:budget]
            for campaign in batch:
                started = time.perf_counter()
                self.store.add_campaign_businesses(campaign, datetime.now(UTC))
                self.work.append((phase, SEARCH, time.perf_counter() - started))
            self.searches += len(batch)
            budget -= len(batch)
            if campaigns:
                continue
            self.searching.pop(0)
            _report(self.instance, run, dg.DagsterEventType.RUN_SUCCESS)


def _burst(store: Store, campaigns: int, seed: int) -> dict:
    """New campaigns in new accounts (2 % of the fleet), a campaign in fifty paused and one in a hundred of those
    resumed, and a pro account moved to starter."""
    added = fleet(max(1, campaigns // 50), seed + 1)
    seed_fleet(store, added, first_account=10 * campaigns)
    active = [campaign.id for campaign in store.campaigns(active_only=True)]
    paused = active[:: max(1, len(active) // max(1, campaigns // 50))]
    for campaign_id in paused:
        store.set_campaign_status(campaign_id, "paused")
    for campaign_id in paused[::2]:
        store.set_campaign_status(campaign_id, "active")
    pro = [usage.account.id for usage in store.accounts() if usage.account.plan == "pro"]
    moved = store.set_account_plan(pro[0], "starter") if pro else {}
    return {"added": len(added), "paused": len(paused), "resumed": len(paused[::2]), "paused_by_plan": len(moved)}


def _summary(ticks: list[Tick]) -> dict:
    """Per phase and sensor: maximum, 95th percentile and median tick, and the most rows one tick recounted."""
    table: dict[str, dict[str, dict]] = {}
    for phase in dict.fromkeys(tick.phase for tick in ticks):
        for sensor in SENSORS:
            mine = [tick for tick in ticks if tick.phase == phase and tick.sensor == sensor]
            seconds = sorted(tick.seconds for tick in mine)
            recounted = [tick.recounted for tick in mine if tick.recounted is not None]
            table.setdefault(phase, {})[sensor] = {
                "ticks": len(seconds),
                "max_s": round(seconds[-1], 3),
                "p95_s": round(seconds[min(len(seconds) - 1, math.ceil(0.95 * len(seconds)) - 1)], 3),
                "median_s": round(statistics.median(seconds), 3),
                "most_recounted": max(recounted) if recounted else None,
                "slowest_tick_statement": max(mine, key=lambda tick: tick.seconds).slowest_statement,
            }
    return table


def _work_summary(work: list[tuple[str, str, float]]) -> dict:
    """Per phase and kind of work (an import's write, a campaign's search): how many, median and slowest."""
    table: dict[str, dict[str, dict]] = {}
    for phase, kind in dict.fromkeys((phase, kind) for phase, kind, _ in work):
        seconds = sorted(s for p, k, s in work if (p, k) == (phase, kind))
        table.setdefault(phase, {})[kind] = {
            "count": len(seconds),
            "median_ms": round(statistics.median(seconds) * 1000, 1),
            "max_ms": round(seconds[-1] * 1000, 1),
        }
    return table


def tick_targets(campaigns: int) -> tuple[float, float]:
    """The most one tick may take and the median after the cold start, at this fleet size: under 5 s and 1 s up
    to 10,000 campaigns, under 30 s and 5 s at 100,000."""
    return (5.0, 1.0) if campaigns <= 10_000 else (30.0, 5.0)


def soak_lines(soaks: list[dict], when: str) -> list[str]:
    """The soak's section of results.md: each sensor's ticks per phase, beside the targets."""
    if not soaks:
        return []
    lines = [
        f"## Soak: the sensors in the daemon's order over a simulated day (measured {when})",
        "",
        "The code location's import, search and coverage sensors, evaluated in turn as the daemon evaluates them, "
        "with their resources, on a fleet of 200 km campaigns of 5 categories in accounts of 100 (every fifth on "
        "pro); between rounds, import runs land their pairs at the measured pace (5 % fail), the searches asked for "
        "run, and the clock moves on by the sensors' 30 s. Phases: a cold start, imports landing, a burst of new "
        "campaigns with pauses, resumes and an account moved to a smaller plan, the next day, and a new release 35 "
        "days on (every loaded pair due again). On PostgreSQL autovacuum is off: the statistics are the cold start's, "
        "then what the ticks take of the tables they outgrew. `python -m bench.soak --campaigns 100000` runs the big "
        "fleet.",
        "",
    ]
    for soak in soaks:
        most, median = tick_targets(soak["campaigns"])
        verdicts = []
        for sensor in SENSORS:
            ticks = [tick for tick in soak["ticks"] if tick["sensor"] == sensor]
            slowest = max(tick["seconds"] for tick in ticks)
            middle = statistics.median(tick["seconds"] for tick in ticks if tick["phase"] != PHASES[0].name)
            verdicts.append(
                f"{sensor} slowest {slowest:.2f} s ({'met' if slowest < most else 'missed'}), median after the cold "
                f"start {middle:.2f} s ({'met' if middle < median else 'missed'})"
            )
        rounds = soak.get("max_rounds_per_phase")
        shortened = f", {rounds} rounds a phase at most" if rounds else ""
        lines += [
            f"**{soak['campaigns']:,} campaigns on {soak['backend']}**, measured {soak.get('measured_at', when)}"
            f"{shortened} (targets: every tick under {most:g} s, the "
            f"median after the cold start under {median:g} s): {'; '.join(verdicts)}. "
            f"{soak['imports']['landed']:,} import runs landed, {soak['imports']['failed']:,} failed, "
            f"{soak['searches']:,} searches." + (f" {soak['note']}" if soak.get("note") else ""),
            "",
            "| phase | sensor | ticks | max s | p95 s | median s | most recounted |",
            "|---|---|---:|---:|---:|---:|---:|",
        ]
        for phase, sensors in soak["phases"].items():
            for sensor, row in sensors.items():
                recounted = "" if row["most_recounted"] is None else f"{row['most_recounted']:,}"
                lines.append(
                    f"| {phase} | {sensor} | {row['ticks']} | {row['max_s']:.2f} | {row['p95_s']:.2f} | "
                    f"{row['median_s']:.2f} | {recounted} |"
                )
        lines.append("")
        if soak.get("work"):
            lines += [
                "The runs' work between ticks, each piece timed: an import run's write (its pairs' places replaced and "
                "what changed about their ids recorded) and a campaign's search (its pairs' id changes applied, "
                "what is new added). In the new release every place comes back under a new id.",
                "",
                "| phase | work | count | median ms | max ms |",
                "|---|---|---:|---:|---:|",
            ]
            for phase, kinds in soak["work"].items():
                for kind, row in kinds.items():
                    lines.append(
                        f"| {phase} | {kind} | {row['count']:,} | {row['median_ms']:.1f} | {row['max_ms']:.1f} |"
                    )
            lines.append("")
    return lines


@contextmanager
def _store(backend: str, admin_url: str, work: Path, campaigns: int, seed: int) -> Iterator[str]:
    if backend == "postgres":
        with scratch_database(backend, admin_url, work, soak_template(admin_url, campaigns, seed)) as database:
            yield database
        return
    with scratch_database(backend, admin_url, work) as database:
        store = open_store(database)
        store.migrate()
        seed_fleet(store, fleet(campaigns, seed))
        yield database


def measure_soak(
    backend: str, admin_url: str, work: Path, campaigns: int, seed: int = 0, max_rounds: int | None = None
) -> dict:
    """The soak's phases on ``backend`` with ``campaigns`` campaigns (each at most ``max_rounds`` rounds): every
    tick's time and what it recounted."""
    releases = work / "soak_overture"
    for release in ("2026-10-15.0", "2026-11-18.0"):
        if not (releases / release).exists():
            write_sample_release(releases, release=release, rows=2_000, files=2, progress=False)
    started = time.perf_counter()
    with ExitStack() as stack:
        database = stack.enter_context(_store(backend, admin_url, work, campaigns, seed))
        seeding = time.perf_counter() - started
        store = open_store(database)
        store.migrate()
        if backend == "postgres":
            worst_statistics(database)
        instance = stack.enter_context(dg.instance_for_test())
        # A simulated clock that still runs: the sensors read it, and every tick is timed by the wall clock.
        traveller = stack.enter_context(time_machine.travel(datetime.now(UTC) + timedelta(hours=1), tick=True))
        resources = {
            "store": StoreResource(database=database),
            "overture": OvertureResource(root=str(releases), release="2026-10-15.0"),
        }
        soak = Fleet(store, instance, resources, "2026-10-15.0", seed)
        events: dict[str, dict] = {}
        rounds = sum(min(phase.rounds, max_rounds or phase.rounds) for phase in PHASES)
        progress = stack.enter_context(tqdm(total=rounds, unit="round", desc="soak", file=sys.stderr))
        for phase in PHASES:
            progress.set_description(phase.name)
            if phase.name.startswith("after a burst"):
                events[phase.name] = _burst(store, campaigns, seed)
            elif phase.name == "next day":
                traveller.shift(timedelta(days=1))
            elif phase.name.startswith("new release"):
                traveller.shift(timedelta(days=FRESH_DAYS))
                soak.release = "2026-11-18.0"
                soak.resources["overture"] = OvertureResource(root=str(releases), release=soak.release)
            for number in range(min(phase.rounds, max_rounds or phase.rounds)):
                soak.round(phase.name, number)
                traveller.shift(timedelta(seconds=TICK_INTERVAL_S))
                soak.serve(TICK_INTERVAL_S, phase.name)
                progress.update()
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "backend": backend,
        "campaigns": campaigns,
        "radius_km": RADIUS_KM,
        "categories_per_campaign": CATEGORIES_PER_CAMPAIGN,
        "pace_runs_per_hour": PACE,
        "failed_share": FAILED_SHARE,
        "seeding_s": round(seeding, 1),
        "max_rounds_per_phase": max_rounds,
        "events": events,
        "imports": soak.imports,
        "searches": soak.searches,
        "phases": _summary(soak.ticks),
        "work": _work_summary(soak.work),
        "ticks": [tick.__dict__ for tick in soak.ticks],
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__)
    parser.add_argument("--campaigns", type=int, default=10_000, help="campaigns in the fleet (default 10,000)")
    parser.add_argument("--backend", choices=("postgres", "duckdb"), default="postgres")
    parser.add_argument("--seed", type=int, default=0, help="the fleet's and the failures' seed (default 0)")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / "out", help="where releases are kept")
    parser.add_argument("--max-rounds", type=int, default=None, help="rounds per phase at most (a short soak)")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    figures = measure_soak(args.backend, args.postgres, args.work, args.campaigns, args.seed, args.max_rounds)
    print(json.dumps(figures, indent=2))
    print("\n".join(soak_lines([figures], "now")), file=sys.stderr)


if __name__ == "__main__":
    main()
