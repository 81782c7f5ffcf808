"""The fleet scenario: account A has a backlog of thousands of block runs, account B adds one campaign; how long
until B's first businesses?

The store, its admission SQL and the policy are the real ones (PostgreSQL); the queue is Dagster's, modelled:
runs leave it two at a time at the measured pace, the highest ``dagster/priority`` first, then the oldest, as the
queued run coordinator serves them, on a simulated clock so that hours of backlog take seconds. Each simulated
tick is the import sensor's: ``admitted_runs`` of the pace and the runs in flight, then ``reserve_missing`` (a
full look when something changed, else from the kept line).

``python -m bench.fleet`` prints the figures as JSON.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import math
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bench.policy import scratch_database
from nakodo_dagster.pacing import BACKLOG_PRIORITY, FIRST_BLOCK_PRIORITY, IMPORT_QUEUE_MINUTES, admitted_runs
from nakodo_dagster.placement import BLOCK_DEGREES, PointLocation, Targeting, first_area
from nakodo_dagster.store import COMMIT_OVERLAP, open_store

# The import sensor's interval.
TICK_SECONDS = 30
# A search run of one campaign once its first pair has landed: the search sensor's interval and the run.
SEARCH_SECONDS = TICK_SECONDS + 15
# Block centres between 60 S and 70 N (the globe has 16,200 blocks; about 11,700 lie there).
ROWS = range(-30, 35)
COLUMNS = range(-90, 90)
SMALL = Targeting((PointLocation(53.75, -1.75, 10),), ("pub",))


def backlog_campaigns(blocks: int, per_campaign: int) -> list[Targeting]:
    """Campaigns of ``per_campaign`` 50 km circles, each at its own block's centre (one block each)."""
    centres = [
        PointLocation(BLOCK_DEGREES * row + 1, BLOCK_DEGREES * column + 1, 50)
        for row, column in itertools.islice(itertools.product(ROWS, COLUMNS), blocks)
    ]
    return [
        Targeting(tuple(centres[start : start + per_campaign]), ("cafe",))
        for start in range(0, len(centres), per_campaign)
    ]


class SimulatedQueue:
    """Dagster's run queue with two slots, served at ``pace`` runs an hour: priority first, then age."""

    def __init__(self, pace: float) -> None:
        self.pace, self.waiting, self.served, self._order = pace, [], 0.0, itertools.count()

    def add(self, runs: list, first_runs: frozenset[str]) -> None:
        for run in runs:
            priority = FIRST_BLOCK_PRIORITY if run.key in first_runs else BACKLOG_PRIORITY
            heapq.heappush(self.waiting, (-priority, next(self._order), run))

    def serve(self, seconds: float) -> list:
        """The runs that finish within ``seconds`` (the queue keeps its fractions of a run)."""
        self.served += self.pace * seconds / 3600
        done = min(len(self.waiting), math.floor(self.served))
        self.served -= done
        return [heapq.heappop(self.waiting)[2] for _ in range(done)]


def _run_until(store, queue: SimulatedQueue, now: datetime, until, relook: bool) -> tuple[datetime, int]:
    """Tick every TICK_SECONDS until ``until(finished runs)`` holds; the time then and the ticks taken."""
    for ticks in itertools.count(1):
        in_flight = len(queue.waiting)
        admitted = admitted_runs(queue.pace, in_flight, IMPORT_QUEUE_MINUTES)
        if admitted:
            reservation = store.reserve_missing(now, admitted, relook=relook)
            queue.add(reservation.runs, reservation.first_runs)
            relook = False
        now += timedelta(seconds=TICK_SECONDS)
        if until(queue.serve(TICK_SECONDS)):
            return now, ticks
    raise AssertionError("unreachable")


def _whole_line(store, now: datetime) -> int:
    """The blocks in line once looks line up no more: a look lines up a bounded number of them
    (``store.admission.LINE_BLOCKS_PER_LOOK``), and A's backlog stands in line whole before B comes."""
    lined = -1
    while (counted := store.reserve_missing(now, 0)).missing_runs != lined:
        lined = counted.missing_runs
    return lined


def measure_fleet(admin_url: str, work: Path, pace: float, blocks: int, per_campaign: int) -> dict:
    """Minutes from B's ``campaign add`` to B's first businesses, with A's backlog of ``blocks`` block runs under
    way (A's own first blocks already served), at ``pace`` block runs an hour."""
    with scratch_database("postgres", admin_url, work) as database:
        store = open_store(database)
        store.migrate()
        big = store.add_account("A", "unlimited")
        small = store.add_account("B", "starter")
        started = time.perf_counter()
        campaigns = backlog_campaigns(blocks, per_campaign)
        for number, targeting in enumerate(campaigns):
            store.add_campaign(f"A {number}", targeting, account_id=big)
        seeding = time.perf_counter() - started
        # A count reads again what changed up to COMMIT_OVERLAP before the one before it, on the store's clock:
        # within that minute of the seeding every look would note A's every block again.
        time.sleep(COMMIT_OVERLAP.total_seconds())
        queue = SimulatedQueue(pace)
        now = datetime.now(UTC)
        line_before = _whole_line(store, now)
        # A's backlog gets under way: its campaigns' first blocks are served first, then its other blocks.
        first_pairs = {(first_area(targeting).key, targeting.categories[0]) for targeting in campaigns}
        waiting_first = set(first_pairs)

        def firsts_served(done: list) -> bool:
            waiting_first.difference_update(pair for run in done for pair in run.pairs)
            return not waiting_first

        now, warmup_ticks = _run_until(store, queue, now, firsts_served, relook=True)
        backlog = _whole_line(store, now) + len(queue.waiting)
        added_at = now
        store.add_campaign("B: Leeds pubs", SMALL, account_id=small)
        wanted = ("cell:53.5,-2", "pub")
        tick_started = time.perf_counter()
        now, ticks = _run_until(store, queue, now, lambda done: any(wanted in run.pairs for run in done), relook=True)
        reserve_seconds = time.perf_counter() - tick_started
    minutes = ((now - added_at).total_seconds() + SEARCH_SECONDS) / 60
    return {
        "pace_block_runs_per_hour": pace,
        "queue_minutes": IMPORT_QUEUE_MINUTES,
        "a_campaigns": len(campaigns),
        "a_blocks": line_before,
        "a_backlog_when_b_added": backlog,
        "seeding_s": round(seeding, 1),
        "warmup_ticks": warmup_ticks,
        "ticks_until_b_served": ticks,
        "seconds_of_those_ticks": round(reserve_seconds, 2),
        "minutes_to_b_first_businesses": round(minutes, 1),
        # First come, first served (the admission before fair share): B's block after everything A had left.
        "minutes_first_come_first_served": round(backlog / pace * 60 + SEARCH_SECONDS / 60, 1),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet", description=__doc__)
    parser.add_argument("--pace", type=float, default=900, help="block runs an hour (default 900)")
    parser.add_argument("--blocks", type=int, default=11_700, help="A's blocks (default 11,700)")
    parser.add_argument("--per-campaign", type=int, default=50, help="A's blocks per campaign (default 50)")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    args = parser.parse_args(argv)
    work = Path(__file__).parent / "out"
    work.mkdir(exist_ok=True)
    print(json.dumps(measure_fleet(args.postgres, work, args.pace, args.blocks, args.per_campaign), indent=2))


if __name__ == "__main__":
    main()
