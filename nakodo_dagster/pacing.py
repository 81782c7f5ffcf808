"""How fast import runs go through Dagster's queue, how much of it the import sensor fills, and which run goes first.

Pure functions over plain numbers, like ``placement``: the sensor passes the gaps it observed between runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from nakodo_dagster.errors import InvalidInput

# Two import runs at a time (dagster.yaml's queue and pool).
IMPORT_SLOTS = 2
# Until the queue has been seen busy, assume the pace of a Kubernetes deployment (about 15 s a run, launch
# included).
DEFAULT_IMPORT_RUNS_PER_HOUR = IMPORT_SLOTS * 3600 // 15
# Runs seen finishing back to back before their pace is trusted over the default.
MIN_PACE_SAMPLES = 5
# The queue holds about this much import work. A pair is reserved when its run is admitted, so a short queue is
# what lets a new campaign's first block overtake a backlog: an hours-long queue would be served first come,
# first served. placement.IMPORT_HOURS stays the safety net for a lost run, not the length of the queue.
IMPORT_QUEUE_MINUTES = 10
# An import run still running after this is stuck, not slow (a block takes seconds, the largest country minutes):
# Dagster's run monitoring fails it and its worker is stopped, so that it frees its import slot instead of holding
# one of the two for good, and its pairs are remembered as failed.
IMPORT_MAX_RUNTIME_MINUTES = 60


def import_pace(busy_gaps_seconds: Sequence[float]) -> float:
    """Import runs an hour the queue gets through, from the gaps between runs that finished back to back
    while others waited (the median: a slow country or an idle moment does not move it)."""
    gaps = sorted(g for g in busy_gaps_seconds if g > 0)
    if len(gaps) < MIN_PACE_SAMPLES:
        return float(DEFAULT_IMPORT_RUNS_PER_HOUR)
    middle = len(gaps) // 2
    median = gaps[middle] if len(gaps) % 2 else (gaps[middle - 1] + gaps[middle]) / 2
    return 3600 / median


def queue_cap(runs_per_hour: float, queue_minutes: float = IMPORT_QUEUE_MINUTES) -> int:
    """How many import runs the queue may hold, queued or running: ``queue_minutes`` of work at its pace, and
    never fewer than twice the slots, so that a slot never idles while the next tick is awaited."""
    if queue_minutes <= 0:
        raise InvalidInput(f"queue minutes {queue_minutes!r} is not allowed: use a number above 0")
    return max(2 * IMPORT_SLOTS, math.floor(runs_per_hour * queue_minutes / 60))


def admitted_runs(runs_per_hour: float, in_flight: int, queue_minutes: float = IMPORT_QUEUE_MINUTES) -> int:
    """How many more import runs may be reserved now: the queue's cap less the runs already queued or running."""
    return max(0, queue_cap(runs_per_hour, queue_minutes) - in_flight)


# Dagster's queue starts a run of higher `dagster/priority` first. A campaign's first block (its centre, its first
# category) outranks the rest, so a new campaign shows businesses within minutes whatever is queued; every other
# run, an analyst's included, keeps Dagster's default 0 and is served in order.
FIRST_BLOCK_PRIORITY = 1
BACKLOG_PRIORITY = 0
