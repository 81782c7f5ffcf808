"""The run tags this project writes and reads, named once: the sensors, the runs and the UI agree on them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

# Dagster's UI leaves out every run tag whose key starts with this, as it does Dagster's own bookkeeping
# (".dagster/repository"). The machinery's tags below are under it: they say nothing to a person reading the runs
# list, which showed eleven tags an import run, three and a half runs a screen. What a person reads stays in sight:
# what a run reads, whom it serves, why, where it stood in line, what it held.
HIDDEN_PREFIX = ".dagster/"

# dagster.yaml's run queue lets two runs with this tag (value "import") run at once.
KIND = "nakodo/kind"
IMPORT_KIND = "import"
# The hash of an import run's canonical payload: the same work always carries the same key.
IMPORT_KEY = f"{HIDDEN_PREFIX}nakodo_import_key"
# The store an import run writes (Store.identity, a hash: never a password): the same payload is the same work only
# for the same store, and two stores sharing one Dagster instance never drop each other's runs.
STORE = f"{HIDDEN_PREFIX}nakodo_store"
# The release the import sensor asked an import run's pairs to move to: the same payload is the same work only for the
# same release, so a roll-out soon after a block's import is not dropped as just done.
RELEASE = "nakodo/release"
# The exact imported_at of the marks a run holds: the key to taking them back or dating them back, never
# touching a mark somebody else wrote on the same pair.
STAMP = f"{HIDDEN_PREFIX}nakodo_stamp"
BOX = "nakodo/box"
AREA = "nakodo/area"
CATEGORIES = "nakodo/categories"
# The names of the campaigns a search run searches, or an import run serves: a person finds a campaign's runs by its
# name, and sees why a run is there.
CAMPAIGN = "nakodo/campaign"
WHY = "nakodo/why"
# Dagster's own tag on a run of one partition.
PARTITION = "dagster/partition"
# Dagster's run monitoring fails a run still running this many seconds after it started.
MAX_RUNTIME = "dagster/max_runtime"
# Dagster's queue starts runs of a higher priority first (pacing.FIRST_BLOCK_PRIORITY).
PRIORITY = "dagster/priority"
# Where an import run stood in line when it was admitted: a campaign's first block, or the backlog.
LINE = "nakodo/line"
FIRST_BLOCK_LINE = "first block"
BACKLOG_LINE = "backlog"
# The pairs an import run held at the drift gate (nakodo_dagster.drift), named in the run list.
HELD = "nakodo/held"
# Where the embedded default's launcher forked a run's worker (nakodo_dagster/launcher.py): how a cancel from the UI
# reaches it, and how run monitoring sees that it died.
RUN_WORKER_PID = f"{HIDDEN_PREFIX}nakodo_run_worker_pid"
RUN_WORKER_HOST = f"{HIDDEN_PREFIX}nakodo_run_worker_host"
# When that worker started (clock ticks since boot): with the pid, which process. Pids are reused, within minutes on
# a busy host, and a dead worker's pid taken by another process kept its run "running" for good.
RUN_WORKER_START = f"{HIDDEN_PREFIX}nakodo_run_worker_start"
# The keys the machinery's tags had before they were hidden: runs recorded then (queued, running, failed and to be
# retried) carry them, and are read and found by them still.
EARLIER_KEYS = {
    IMPORT_KEY: "nakodo/import_key",
    STAMP: "nakodo/stamp",
    RUN_WORKER_PID: "nakodo/run_worker_pid",
    RUN_WORKER_HOST: "nakodo/run_worker_host",
    RUN_WORKER_START: "nakodo/run_worker_start",
}


def run_tag(run_tags: Mapping[str, str], key: str) -> str | None:
    """A run's tag: under its key, or under the key it had before it was hidden; None if it has neither."""
    value = run_tags.get(key)
    if value is None and key in EARLIER_KEYS:
        return run_tags.get(EARLIER_KEYS[key])
    return value


def keys_of(key: str) -> tuple[str, ...]:
    """The keys a run's tag may be under, to find runs by it: its own, and the one it had before it was hidden."""
    return (key, EARLIER_KEYS[key]) if key in EARLIER_KEYS else (key,)


# A tag value the run list shows whole.
_NAMES_IN_TAG = 200


def campaign_names(names: Sequence[str], count: int | None = None) -> str:
    """The CAMPAIGN tag of a run for these campaigns: their names, as many as fit, then how many more; ``count``
    is how many campaigns there are in all when ``names`` are only the first of them."""
    total = len(names) if count is None else count
    shown = ""
    for shown_count, name in enumerate(names):
        more = f" and {total - shown_count} more"
        if shown and len(shown) + len(name) + 2 + len(more) > _NAMES_IN_TAG:
            return shown + more
        shown = f"{shown}, {name}" if shown else name
    return shown + (f" and {total - len(names)} more" if total > len(names) else "")


def stamp_tag(stamp: datetime) -> str:
    """A mark's stamp as a tag value (UTC, ISO 8601, microseconds kept)."""
    return stamp.astimezone(UTC).isoformat()


def stamp_from_tag(value: str) -> datetime:
    """The stamp a tag value carries."""
    return datetime.fromisoformat(value)


def held_pairs(pairs: Sequence[str]) -> str:
    """The HELD tag of a run that held these pairs ('bakery in cell:53.5,-2'): how many, then as many as fit."""
    return f"{len(pairs)}: {campaign_names(pairs)}"
