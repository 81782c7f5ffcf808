"""What the soak reads at the end, from the store and the instance, not from logs: the needed pairs and their states,
the kept coverage counts beside a full recount, each campaign's businesses against an independent reading of the release
files, the failed runs' headlines, the marks without a run; and the invariants its figures break, in words."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from bench.faults.runs import FAILED, UNFINISHED, import_runs
from bench.independent import campaign_businesses, expected_rows
from nakodo_dagster import tags
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job
from nakodo_dagster.placement import REQUESTED, Cutoffs, PlaceImport, areas_for
from nakodo_dagster.placement import import_runs as runs_for_pairs
from nakodo_dagster.sensors.failure_sensor import run_failure_headline
from nakodo_dagster.store import Store
from nakodo_dagster.store.models import PAIR_STATES, Campaign

# Import runs at once: the project's dagster.yaml limits runs tagged nakodo/kind=import to two.
IMPORT_SLOTS = 2
# A headline longer than this is a dump, not a line to read.
HEADLINE_CHARACTERS = 300
# A traceback, or an exception's dotted class name and its message: what a failure says when nobody explained it.
_TECHNICAL = re.compile(r"Traceback|[\w.]*\.\w*(Error|Exception)\b|\w+(Error|Exception):")


def needed_pairs(store: Store) -> set[tuple[str, str]]:
    """Every (area, category) pair an active campaign needs."""
    return pairs_of(store.campaigns(active_only=True))


def pairs_of(campaigns: Iterable[Campaign]) -> set[tuple[str, str]]:
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
    rows = {(r.area, r.category): r for r in import_rows_of(store, pairs)}
    return Counter(cutoffs.row_state(rows[pair]) if pair in rows else "missing" for pair in pairs)


def import_rows_of(store: Store, pairs: set[tuple[str, str]]) -> list[PlaceImport]:
    """place_imports' rows of exactly these pairs (the store reads every pair of their areas and categories)."""
    rows = store.import_rows({a for a, _ in pairs}, {c for _, c in pairs})
    return [row for row in rows if (row.area, row.category) in pairs]


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
    fresh = [row for row in import_rows_of(store, needed) if cutoffs.row_state(row) == "fresh"]
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
    dg.Failure's description, as failure.failure_headline), else that step's error, else its run failure's, as the
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


def orphan_marks(instance: dg.DagsterInstance, store: Store, pairs: set[tuple[str, str]]) -> int:
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


def fresh_by_release(store: Store, pairs: set[tuple[str, str]]) -> Counter:
    """How many of these pairs hold each release."""
    return Counter(row.release for row in import_rows_of(store, pairs) if row.release != REQUESTED)


def failed_marks(store: Store, pairs: set[tuple[str, str]]) -> dict[str, str]:
    """Each of these pairs marked failed, with the reason its mark carries."""
    return {f"{row.area} {row.category}": row.failure for row in import_rows_of(store, pairs) if row.failure}


def first_business_waits(store: Store) -> list[float]:
    """For each campaign with businesses, seconds from its creation to its first business."""
    rows = store._transact(
        lambda tx: tx.rows(
            "SELECT c.created_at, min(b.added_at) FROM campaigns c JOIN campaign_businesses b "
            "ON b.campaign_id = c.id GROUP BY c.id, c.created_at"
        )
    )
    return [(first - created).total_seconds() for created, first in rows]
