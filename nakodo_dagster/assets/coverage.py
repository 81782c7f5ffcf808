"""How the pairs active campaigns need stand, on the places asset's page: a check whose result counts them by
state (fresh, on their way, failed, stale or missing) and links each pair that is not fresh, and the sensor that
records it whenever it changes.

The partitions tab of places is every registered area times every registered category, so it counts pairs no
campaign needs as missing; this check counts only the pairs campaigns need, by the one freshness rule.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from urllib.parse import quote

import dagster as dg

from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.partitions import places_partition
from nakodo_dagster.placement import FRESH_DAYS, REQUESTED, RETRY_DAYS, retry_allowed_at
from nakodo_dagster.resources import StoreResource
from nakodo_dagster.store import Store
from nakodo_dagster.store.models import Coverage, NeededPair

# The check on places as a whole that counts the pairs active campaigns need, by state.
NEEDED_PAIRS_FRESH_OR_COMING = "needed_pairs_fresh_or_coming"
# The pairs of each state the store lists; the counts are always whole.
LISTED_PAIRS = 10
# The UI shows a Markdown value inline only under 1,000 characters; a longer one hides behind "[Show Markdown]".
INLINE_MARKDOWN_CHARS = 1_000
# Kept free for the last line of a list, which says how many more there are.
_MORE_LINE_CHARS = 80
# The states listed, by metadata key, in the order a data engineer acts on them.
_LISTED_STATES = {"failed": "failed_pairs", "missing": "stale_or_missing_pairs", "coming": "on_their_way_pairs"}


def _day(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%Y-%m-%d %H:%M} UTC"


def _why(pair: NeededPair) -> str:
    """Why the pair is in its state, or until when, in a few words."""
    if pair.imported_at is None:
        return "never asked for"
    # A mark's time is when its import failed, if that was recorded, else when it was asked for.
    when = f"{'failed' if pair.failure else 'asked for'} {_day(pair.imported_at)}"
    if pair.state == "failed":
        # Why it failed is in `nakodo imports status` and on the failed run: here it would crowd the list out.
        return f"{when}; asked for again from {_day(retry_allowed_at(pair.imported_at))}"
    if pair.state == "coming":
        return when
    if pair.release == REQUESTED:
        return f"{when}, over {RETRY_DAYS} days ago: due again"
    return f"{pair.release} loaded {_day(pair.imported_at)}, over {FRESH_DAYS} days ago"


def _link(pair: NeededPair) -> str:
    """A Markdown link to the pair's partition on the places page."""
    key = str(places_partition(pair.area, pair.category))
    return f"[{pair.area} {pair.category}](/assets/{PLACES.to_user_string()}?view=partitions&partition={quote(key)})"


def _pair_list(coverage: Coverage, state: str) -> str:
    """The state's listed pairs, each a link to its partition, as many as the UI shows inline; the rest counted."""
    total = coverage.counts[state]
    if not total:
        return "none"
    lines: list[str] = []
    for pair in (pair for pair in coverage.listed if pair.state == state):
        line = f"- {_link(pair)}: {_why(pair)}"
        if sum(len(kept) + 1 for kept in lines) + len(line) + _MORE_LINE_CHARS >= INLINE_MARKDOWN_CHARS:
            break
        lines.append(line)
    if total > len(lines):
        lines.append(f"- and {total - len(lines):,} more: `nakodo imports status`")
    return "\n".join(lines)


def coverage_result(coverage: Coverage) -> tuple[bool, dict[str, dg.MetadataValue]]:
    """Whether every pair an active campaign needs is fresh or on its way, and the metadata that says how many
    are in each state and links those that are not fresh."""
    counts = coverage.counts
    metadata = {
        "needed_pairs": dg.MetadataValue.int(sum(counts.values())),
        "fresh": dg.MetadataValue.int(counts["fresh"]),
        "on_their_way": dg.MetadataValue.int(counts["coming"]),
        "failed": dg.MetadataValue.int(counts["failed"]),
        "stale_or_missing": dg.MetadataValue.int(counts["missing"]),
    } | {key: dg.MetadataValue.md(_pair_list(coverage, state)) for state, key in _LISTED_STATES.items()}
    return counts["failed"] == 0 and counts["missing"] == 0, metadata


def _description(coverage: Coverage) -> str:
    counts = coverage.counts
    return (
        f"{counts['fresh']:,} of {sum(counts.values()):,} pairs campaigns need are fresh, {counts['coming']:,} on "
        f"their way, {counts['failed']:,} failed, {counts['missing']:,} stale or missing."
    )


def _check_fields(coverage: Coverage) -> dict:
    """What the check's result says, whoever records it: the sensor without a run, or a run of places."""
    passed, metadata = coverage_result(coverage)
    return {
        "passed": passed,
        "severity": dg.AssetCheckSeverity.WARN,
        "metadata": metadata,
        "description": _description(coverage),
    }


def coverage_check_result(store: Store, now: datetime) -> dg.AssetCheckResult:
    """The check needed_pairs_fresh_or_coming as it stands now, as places' op yields it when it is selected."""
    return dg.AssetCheckResult(
        check_name=NEEDED_PAIRS_FRESH_OR_COMING, **_check_fields(store.coverage(now, LISTED_PAIRS))
    )


def _fingerprint(coverage: Coverage) -> str:
    """What the check's result shows, in a few bytes: the same fingerprint, the same result."""
    shown = [coverage.counts, [(p.area, p.category, p.state, p.release, str(p.imported_at)) for p in coverage.listed]]
    return hashlib.sha1(json.dumps(shown).encode()).hexdigest()


def _last_fingerprint(cursor: str | None) -> str | None:
    # A cursor of the sensor's earlier versions, which also carried when it last counted, is JSON.
    if cursor and cursor.startswith("{"):
        return json.loads(cursor)["fingerprint"]
    return cursor or None


def record_coverage(store: Store, cursor: str | None, now: datetime) -> dg.SensorResult:
    """The coverage check's result when a needed pair's state changed since the last tick; a skip that says so
    otherwise. The cursor is the last result's fingerprint."""
    fingerprint = _last_fingerprint(cursor)
    if fingerprint is not None and not store.recount_coverage(now):
        return dg.SensorResult(skip_reason="No needed pair changed since the last tick.", cursor=fingerprint)
    coverage = store.coverage(now, LISTED_PAIRS)
    if _fingerprint(coverage) == fingerprint:
        return dg.SensorResult(skip_reason=f"Unchanged: {_description(coverage)}", cursor=fingerprint)
    evaluation = dg.AssetCheckEvaluation(
        asset_key=PLACES, check_name=NEEDED_PAIRS_FRESH_OR_COMING, **_check_fields(coverage)
    )
    return dg.SensorResult(asset_events=[evaluation], cursor=_fingerprint(coverage))


@dg.sensor(
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description=f"Records the check {NEEDED_PAIRS_FRESH_OR_COMING} of places when a needed pair's state changes. "
    "A tick works out again only the pairs that changed since the one before (campaigns added, paused or resumed, "
    "imports asked for, landed or failed, releases and marks aging past their boundaries), through indexes, and "
    "counts the kept states; no run.",
)
def places_coverage_sensor(context: dg.SensorEvaluationContext, store: StoreResource) -> dg.SensorResult:
    with store.held() as held:
        return record_coverage(held, context.cursor, datetime.now(UTC))
