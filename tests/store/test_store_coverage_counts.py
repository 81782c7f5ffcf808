"""The coverage counts are kept as pairs change, not counted from every campaign's pairs: after any sequence of
campaign adds, pauses, resumes and new locations, imports asked for, landed, failed, cancelled and forgotten, and
time passing, they hold against a full recount worked out in Python from the campaigns and place_imports, and the
campaigns' progress read from them holds against the progress counted from every campaign's pairs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import NOW, kept_progress, record_release

from bench.policy import scratch_database
from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    RETRY_DAYS,
    Cutoffs,
    PointLocation,
    Targeting,
    areas_for,
)
from nakodo_dagster.store import Store, open_store
from nakodo_dagster.store import shared as store_shared
from nakodo_dagster.store.models import PAIR_STATES, NeededPair

CATEGORIES = ("bakery", "cafe", "pub")
# Points on a small grid around Leeds: 10 km circles share and straddle cells, as neighbouring campaigns do.
POINTS = [PointLocation(53.6 + 0.17 * row, -1.9 + 0.23 * column, 10) for row in range(3) for column in range(3)]
LISTED = 3
# Steps of time that cross each boundary of the rule: a mark's 6 hours, the failed week, a release's 35 days; and
# the week less 6 hours, where a failure's block ended when failed marks were dated back.
STEPS = [
    timedelta(minutes=5),
    timedelta(hours=IMPORT_HOURS),
    timedelta(days=RETRY_DAYS) - timedelta(hours=IMPORT_HOURS),
    timedelta(days=RETRY_DAYS),
    timedelta(days=FRESH_DAYS),
]
REASON = "file part-00003.parquet is unreadable"

operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("add"),
            st.lists(st.sampled_from(POINTS), min_size=1, max_size=2, unique=True),
            st.lists(st.sampled_from(CATEGORIES), min_size=1, max_size=3, unique=True),
        ),
        st.tuples(st.sampled_from(["pause", "resume", "locate"]), st.integers(0, 50), st.sampled_from(POINTS)),
        st.tuples(st.sampled_from(["reserve", "land", "fail", "cancel", "force", "forget"]), st.integers(0, 50)),
        st.tuples(st.just("wait"), st.sampled_from(STEPS)),
    ),
    min_size=1,
    max_size=12,
)


def _recount(store: Store, now: datetime, listed: int) -> tuple[dict[str, int], list[NeededPair]]:
    """The coverage counted from nothing: every active campaign's areas times its categories, each pair once,
    in the state placement.Cutoffs gives its place_imports row; the oldest ``listed`` of each state."""
    needed = {
        (area, category)
        for campaign in store.campaigns(active_only=True)
        for area in areas_for(campaign.targeting)
        for category in campaign.targeting.categories
    }
    rows = {(row.area, row.category): row for row in store.import_rows({a for a, _ in needed}, CATEGORIES)}
    cutoffs = Cutoffs.at(now)
    pairs = []
    for area, category in needed:
        row = rows.get((area, category))
        state = cutoffs.row_state(row) if row else "missing"
        pairs.append(
            NeededPair(area, category, state, row.release, row.imported_at, row.failure)
            if row
            else NeededPair(area, category, state, None, None)
        )
    counts = {state: sum(1 for pair in pairs if pair.state == state) for state in PAIR_STATES}

    def oldest(pair: NeededPair) -> tuple:
        return (pair.imported_at is not None, pair.imported_at or now, pair.area, pair.category)

    listed_pairs = [
        pair
        for state in PAIR_STATES
        for pair in sorted((pair for pair in pairs if pair.state == state), key=oldest)[:listed]
    ]
    return counts, listed_pairs


def _apply(
    store: Store, operation: tuple, now: datetime, stamps: list[datetime], failures: dict[tuple[str, str], datetime]
) -> datetime:
    """One user or sensor action at ``now``; returns the time after it. ``failures`` gets each pair marked failed,
    with the failure's time."""
    kind, *args = operation
    campaigns = store.campaigns()
    if kind == "add":
        points, categories = args
        store.add_campaign(f"campaign {len(campaigns)}", Targeting(tuple(points), tuple(categories)), now=now)
    elif kind in ("pause", "resume", "locate") and campaigns:
        campaign = campaigns[args[0] % len(campaigns)]
        if kind == "locate":
            if args[1] not in campaign.targeting.locations:
                store.add_campaign_location(campaign.id, args[1])
        else:
            store.set_campaign_status(campaign.id, "paused" if kind == "pause" else "active")
    elif kind == "reserve":
        reservation = store.reserve_missing(now, 1 + args[0] % 3)
        if reservation.runs:
            stamps.append(now)
    elif kind == "force":
        # The analyst's override, on the first cell of a point, needed or not.
        area = next(iter(areas_for(Targeting((POINTS[args[0] % len(POINTS)],), ("cafe",)))))
        stamps.append(store.force_request([(area, "cafe")], now))
    elif kind in ("land", "fail", "cancel") and stamps:
        stamp = stamps.pop(args[0] % len(stamps))
        pairs = store.marks_stamped(stamp)
        if kind == "land" and pairs:
            # A reservation's stamp spans its runs: each lands on its own, as its run writes it.
            for area, category in pairs:
                record_release(store, [(area, category)], now)
        elif kind == "fail":
            assert store.mark_failed(pairs, stamp, now, REASON) == len(pairs)
            failures.update(dict.fromkeys(pairs, now))
        else:
            store.take_back(pairs, stamp)
    elif kind == "forget":
        failed = [p for p in store.coverage(now, listed=50).listed if p.state == "failed"]
        if failed:
            pair = failed[args[0] % len(failed)]
            store.forget_failed_import(pair.area, pair.category, now)
    elif kind == "wait":
        return now + args[0]
    return now + timedelta(seconds=1)


def _check_failures(store: Store, failures: dict[tuple[str, str], datetime], now: datetime) -> None:
    """Every pair marked failed and not asked for, loaded or forgotten since keeps the failure's own time and
    reason, and reads as failed from the failure, at once, for exactly RETRY_DAYS, needed or not."""
    rows = {(r.area, r.category): r for r in store.import_rows({a for a, _ in failures}, CATEGORIES)}
    cutoffs = Cutoffs.at(now)
    for pair, failed_at in list(failures.items()):
        row = rows.get(pair)
        if row is None or row.failure is None:
            del failures[pair]
            continue
        assert (row.imported_at, row.failure) == (failed_at, REASON)
        assert cutoffs.row_state(row) == ("failed" if now < failed_at + timedelta(days=RETRY_DAYS) else "missing")


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def fresh_store(request, tmp_path_factory, pg_admin_url) -> Callable[[], AbstractContextManager[Store]]:
    """A new, migrated store on the backend for each example: counts over a store many examples filled would
    rarely see a pair start or stop being needed."""

    @contextmanager
    def make() -> Iterator[Store]:
        with scratch_database(request.param, pg_admin_url, tmp_path_factory.mktemp("store")) as database:
            store = open_store(database)
            store.migrate()
            yield store

    return make


def _replay_checking_every_count(
    fresh_store: Callable[[], AbstractContextManager[Store]], monkeypatch: pytest.MonkeyPatch, operations: list[tuple]
) -> None:
    # Each count reads again what was stamped within COMMIT_OVERLAP of the one before, on the store's clock: in a
    # test that takes seconds, that would be everything. One change at a time needs no overlap, and without it a
    # count reads only what changed since the one before, as it does long after the writes.
    monkeypatch.setattr(store_shared, "COMMIT_OVERLAP", timedelta(0))
    with fresh_store() as store:
        now, stamps, failures = NOW, [], {}
        for operation in operations:
            now = _apply(store, operation, now, stamps, failures)
            _check_failures(store, failures, now)
            coverage = store.coverage(now, LISTED)
            counts, listed = _recount(store, now, LISTED)
            assert coverage.counts == counts, operation
            assert coverage.listed == listed, operation
            # The search sensor's kept progress, moved by the same counts: the same as counted from every
            # campaign's pairs.
            store.count_progress(now)
            assert kept_progress(store) == store.search_progress(now), operation


# Twenty sequences in `make test` catch a count that drifts on a common path; the long target searches five times
# deeper for the rare orderings.
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=operations)
def test_kept_counts_match_a_full_recount_after_any_sequence_of_changes(
    fresh_store, monkeypatch, operations: list[tuple]
):
    _replay_checking_every_count(fresh_store, monkeypatch, operations)


@pytest.mark.long
@pytest.mark.slow
@pytest.mark.timeout(900)
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(operations=operations)
def test_kept_counts_match_a_full_recount_after_many_more_sequences(fresh_store, monkeypatch, operations: list[tuple]):
    _replay_checking_every_count(fresh_store, monkeypatch, operations)
