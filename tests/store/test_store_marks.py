"""Asking for imports: the compare and set, the timeouts it restates, taking marks back, imports off."""

from __future__ import annotations

import random
import threading
from datetime import timedelta

import pytest
from store_helpers import NOW, RELEASE, imports_table, needs_of, places_table, record_release, reserve_pairs, run_for

from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    REQUESTED,
    RETRY_DAYS,
    PointLocation,
    Targeting,
    areas_for,
    import_needs,
    import_runs,
)
from nakodo_dagster.store import ImportStatus

LEEDS = "cell:53.5,-2"
SECOND = timedelta(seconds=1)
# Three 2 km circles at cell centres far apart: one cell each, three blocks, three runs.
THREE_CITIES = Targeting(
    (PointLocation(53.75, -1.75, 2), PointLocation(48.75, 2.25, 2), PointLocation(40.25, -3.75, 2)), ("cafe",)
)


def test_a_new_pair_is_reserved_once(store):
    assert reserve_pairs(store, {LEEDS: ["cafe", "pub", "cafe"]}, NOW, NOW) == {LEEDS: ["cafe", "pub"]}
    assert reserve_pairs(store, {LEEDS: ["cafe", "pub"]}, NOW + SECOND, NOW + SECOND) == {}
    table = imports_table(store)
    assert table == {(LEEDS, "cafe"): (REQUESTED, 0, NOW), (LEEDS, "pub"): (REQUESTED, 0, NOW)}


def test_a_failed_import_blocks_retries_for_a_week(store):
    store.force_request([(LEEDS, "cafe")], NOW)
    for later in (timedelta(hours=1), timedelta(hours=IMPORT_HOURS) + SECOND, timedelta(days=RETRY_DAYS) - SECOND):
        assert reserve_pairs(store, {LEEDS: ["cafe"]}, NOW + later, NOW + later) == {}
    after = NOW + timedelta(days=RETRY_DAYS) + SECOND
    assert reserve_pairs(store, {LEEDS: ["cafe"]}, after, after) == {LEEDS: ["cafe"]}
    assert imports_table(store)[(LEEDS, "cafe")] == (REQUESTED, 0, after)


def test_a_real_release_blocks_for_thirty_five_days(store):
    record_release(store, [(LEEDS, "cafe")], NOW)
    for later in (timedelta(days=1), timedelta(days=FRESH_DAYS) - SECOND):
        assert reserve_pairs(store, {LEEDS: ["cafe"]}, NOW + later, NOW + later) == {}
    after = NOW + timedelta(days=FRESH_DAYS) + SECOND
    assert reserve_pairs(store, {LEEDS: ["cafe"]}, after, after) == {LEEDS: ["cafe"]}


def test_force_request_marks_whatever_the_age(store):
    record_release(store, [(LEEDS, "cafe")], NOW)
    stamp = store.force_request([(LEEDS, "cafe"), (LEEDS, "pub")], NOW + SECOND)
    assert stamp == NOW + SECOND
    assert imports_table(store) == {
        (LEEDS, "cafe"): (REQUESTED, 0, stamp),
        (LEEDS, "pub"): (REQUESTED, 0, stamp),
    }


def test_take_back_removes_only_this_callers_marks(store):
    mine = {LEEDS: ["cafe", "pub"], "cell:54,-2": ["cafe"]}
    assert reserve_pairs(store, mine, NOW, NOW) == mine
    # Another caller's mark on the same pair a moment later (the analyst's override), and a real release
    # recorded with the very same timestamp: neither is this caller's to delete.
    later = store.force_request([(LEEDS, "pub")], NOW + timedelta(microseconds=1))
    record_release(store, [("cell:54.5,-2", "cafe")], NOW)
    taken = store.take_back([(LEEDS, "cafe"), (LEEDS, "pub"), ("cell:54.5,-2", "cafe")], NOW)
    assert taken == 1
    assert imports_table(store) == {
        (LEEDS, "pub"): (REQUESTED, 0, later),
        ("cell:54,-2", "cafe"): (REQUESTED, 0, NOW),
        ("cell:54.5,-2", "cafe"): (RELEASE, 0, NOW),
    }


def test_eight_processes_reserve_each_pair_exactly_once(store, database_url, workers):
    areas = [f"cell:{lat},-2" for lat in (50, 50.5, 51, 51.5, 52, 52.5, 53, 53.5, 54, 54.5)]
    pairs = [(a, c) for a in areas for c in ("cafe", "pub", "bakery")]
    # A fresh release nobody may take, and a stale one and a week-old failure that one caller must take.
    record_release(store, [pairs[0]], NOW - timedelta(days=1))
    record_release(store, [pairs[1]], NOW - timedelta(days=FRESH_DAYS + 1))
    store.force_request([pairs[2]], NOW - timedelta(days=RETRY_DAYS + 1))
    rng = random.Random(8)
    subsets = [rng.sample(pairs, 18) for _ in range(8)]
    subsets[0] = pairs  # every pair is wanted by somebody
    args = [
        {"pairs": s, "stamp": (NOW + timedelta(microseconds=i)).isoformat(), "now": NOW.isoformat()}
        for i, s in enumerate(subsets)
    ]
    results = workers.run("reserve", database_url, args)
    won = [tuple(pair) for result in results for pair in result]
    assert len(won) == len(set(won)), "a pair was reserved twice"
    assert set(won) == set(pairs) - {pairs[0]}
    table = imports_table(store)
    for i, result in enumerate(results):
        for area, category in result:
            assert table[(area, category)] == (REQUESTED, 0, NOW + timedelta(microseconds=i))


def test_threads_of_one_process_reserve_each_pair_exactly_once(store):
    pairs = [(f"cell:{lat},0", c) for lat in range(20) for c in ("cafe", "pub")]
    won: list[tuple[str, str]] = []

    def reserve(i: int) -> None:
        missing: dict[str, list[str]] = {}
        for area, category in random.Random(i).sample(pairs, 25):
            missing.setdefault(area, []).append(category)
        for _ in range(3):
            got = reserve_pairs(store, missing, NOW + timedelta(microseconds=i), NOW)
            won.extend((area, category) for area, categories in got.items() for category in categories)

    threads = [threading.Thread(target=reserve, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == len(set(won))
    assert set(won) == set(imports_table(store))


def test_reserve_missing_marks_one_run_per_block_of_the_campaigns(store):
    store.add_campaign("three cities", THREE_CITIES)
    areas = areas_for(THREE_CITIES)

    reservation = store.reserve_missing(NOW, max_runs=10)

    expected = import_runs({area: ["cafe"] for area in areas}, areas)
    assert sorted(reservation.runs, key=lambda run: run.key) == sorted(expected, key=lambda run: run.key)
    # The campaign's first block (its first location's centre) leads the line.
    assert reservation.runs[0].areas == ("cell:53.5,-2",)
    assert reservation.first_runs == {reservation.runs[0].key}
    assert (reservation.missing_runs, reservation.missing_pairs, reservation.coming_pairs) == (3, 3, 0)
    assert imports_table(store) == {(area, "cafe"): (REQUESTED, 0, NOW) for area in areas}
    # An hour later the imports are on their way: nothing more is asked for, three areas to come.
    later = store.reserve_missing(NOW + timedelta(hours=1), max_runs=10)
    assert (later.runs, later.missing_runs, later.coming_pairs) == ([], 0, 3)


def test_reserve_missing_puts_every_campaigns_first_block_before_older_campaigns_other_blocks(store):
    store.add_campaign("three cities", THREE_CITIES)
    store.add_campaign("Tokyo bakeries", Targeting((PointLocation(35.75, 139.75, 2),), ("bakery",)))

    first = store.reserve_missing(NOW, max_runs=2)

    assert (len(first.runs), first.missing_runs) == (2, 4)
    assert [run.pairs for run in first.runs] == [(("cell:53.5,-2", "cafe"),), (("cell:35.5,139.5", "bakery"),)]
    assert first.first_runs == {run.key for run in first.runs}
    # What was not admitted stays missing, unmarked, and is asked for by the next look.
    assert len(imports_table(store)) == 2
    second = store.reserve_missing(NOW + SECOND, max_runs=2)
    assert (len(second.runs), second.missing_runs, second.coming_pairs) == (2, 2, 2)
    assert {run.areas for run in second.runs} == {("cell:48.5,2",), ("cell:40,-4",)}
    assert second.first_runs == frozenset()
    assert len(imports_table(store)) == 4


def test_reserve_missing_lets_accounts_take_turns(store):
    big = store.add_account("big", "unlimited")
    small = store.add_account("small", "starter")
    for number in range(6):
        # Six campaigns of three blocks each, one category: a backlog of 18 block runs.
        lng = -59.75 + 10 * number
        locations = tuple(PointLocation(10.25, lng + 3 * block, 2) for block in range(3))
        store.add_campaign(f"big {number}", Targeting(locations, ("cafe",)), account_id=big)
    store.add_campaign("small", Targeting((PointLocation(53.75, -1.75, 2),), ("pub",)), account_id=small)

    reservation = store.reserve_missing(NOW, max_runs=4)

    # The small account's only block is admitted in the first round, not after the big account's backlog.
    assert (("cell:53.5,-2", "pub"),) in [run.pairs for run in reservation.runs[:2]]
    assert reservation.missing_runs == 19


def test_a_tick_with_nothing_changed_admits_from_the_kept_line(store):
    store.add_campaign("three cities", THREE_CITIES)
    first = store.reserve_missing(NOW, max_runs=1)

    second = store.reserve_missing(NOW + SECOND, max_runs=1, relook=False)
    third = store.reserve_missing(NOW + 2 * SECOND, max_runs=5, relook=False)

    assert [len(r.runs) for r in (first, second, third)] == [1, 1, 1]
    assert [r.missing_runs for r in (first, second, third)] == [3, 2, 1]
    areas = areas_for(THREE_CITIES)
    assert imports_table(store).keys() == {(area, "cafe") for area in areas}
    # The line is spent: nothing more until something changes.
    assert store.reserve_missing(NOW + 3 * SECOND, max_runs=5, relook=False).runs == []


def test_a_kept_line_never_reserves_a_pair_someone_else_took_meanwhile(store):
    store.add_campaign("three cities", THREE_CITIES)
    store.reserve_missing(NOW, max_runs=1)
    analyst = store.force_request([("cell:48.5,2", "cafe"), ("cell:40,-4", "cafe")], NOW + SECOND)

    later = store.reserve_missing(NOW + 2 * SECOND, max_runs=5, relook=False)

    assert later.runs == []
    assert {stamp for _, _, stamp in imports_table(store).values()} == {NOW, analyst}


def test_reserve_missing_with_no_room_counts_and_writes_nothing(store):
    store.add_campaign("three cities", THREE_CITIES)

    counted = store.reserve_missing(NOW, max_runs=0)

    assert (counted.runs, counted.missing_runs, counted.missing_pairs) == ([], 3, 3)
    assert imports_table(store) == {}


def test_reserve_missing_reads_only_active_campaigns_named_or_not(store):
    paused = store.add_campaign("three cities", THREE_CITIES)
    store.set_campaign_status(paused, "paused")

    assert store.reserve_missing(NOW, max_runs=10).missing_runs == 0
    # Only active campaigns are held to their account's plan: a paused one asks for nothing, even by name.
    assert store.reserve_missing(NOW, max_runs=10, campaign_ids=[paused]).missing_runs == 0
    store.set_campaign_status(paused, "active")
    assert len(store.reserve_missing(NOW, max_runs=10, campaign_ids=[paused]).runs) == 3


def test_a_location_added_later_is_needed_too(store):
    campaign = store.add_campaign("Leeds", Targeting((PointLocation(53.75, -1.75, 2),), ("cafe", "pub")))
    store.add_campaign_location(campaign, PointLocation(48.75, 2.25, 2))

    needs = needs_of(store, NOW)

    assert needs.missing == {"cell:48.5,2": ["cafe", "pub"], "cell:53.5,-2": ["cafe", "pub"]}


@pytest.mark.parametrize(
    ("age", "release", "reserved"),
    [
        (timedelta(days=RETRY_DAYS) - SECOND, REQUESTED, False),
        (timedelta(days=RETRY_DAYS), REQUESTED, True),
        (timedelta(days=FRESH_DAYS) - SECOND, RELEASE, False),
        (timedelta(days=FRESH_DAYS), RELEASE, True),
    ],
)
def test_the_compare_and_set_agrees_with_import_needs_at_the_boundaries(store, age, release, reserved):
    targeting = Targeting((PointLocation(53.75, -1.75, 2),), ("cafe",))
    store.add_campaign("Leeds", targeting)
    if release == REQUESTED:
        store.force_request([(LEEDS, "cafe")], NOW - age)
    else:
        record_release(store, [(LEEDS, "cafe")], NOW - age)
    rows = store.import_rows([LEEDS], ["cafe"])

    assert (LEEDS in import_needs(areas_for(targeting), ["cafe"], rows, NOW).missing) is reserved
    assert bool(store.reserve_missing(NOW, max_runs=10).runs) is reserved


def test_four_processes_reserve_the_campaigns_needs_once(store, database_url, workers):
    for number in range(6):
        store.add_campaign(f"campaign {number}", Targeting((PointLocation(50 + number, -2, 50),), ("cafe", "pub")))
    stamps = [NOW + timedelta(microseconds=i) for i in range(4)]

    results = workers.run("reserve-missing", database_url, [{"now": stamp.isoformat()} for stamp in stamps])

    won = [tuple(pair) for result in results for pair in result]
    assert len(won) == len(set(won)), "a pair was reserved twice"
    assert set(won) == set(imports_table(store))
    assert needs_of(store, NOW).missing == {}


def test_import_status_counts_each_state_per_category(store):
    record_release(store, [("cell:50,0", "cafe"), ("cell:50.5,0", "cafe")], NOW - timedelta(days=3))
    record_release(store, [("cell:51,0", "cafe")], NOW - timedelta(days=FRESH_DAYS + 2))
    store.force_request([("cell:52,0", "cafe")], NOW - timedelta(hours=1))
    store.force_request([("cell:53,0", "cafe"), ("cell:53,0", "pub")], NOW - timedelta(hours=IMPORT_HOURS + 1))
    # A failed mark past its week is asked for again, as import_needs says: due, not failed.
    store.force_request([("cell:54,0", "cafe")], NOW - timedelta(days=RETRY_DAYS + 1))
    assert store.import_status(NOW) == [
        ImportStatus(
            "cafe", fresh=2, coming=1, failed=1, stale=2, oldest_release_at=NOW - timedelta(days=FRESH_DAYS + 2)
        ),
        ImportStatus("pub", fresh=0, coming=0, failed=1, stale=0, oldest_release_at=None),
    ]


def test_a_write_says_whose_mark_on_its_way_it_replaced(store):
    ours = reserve_pairs(store, {LEEDS: ["cafe", "pub"]}, NOW, NOW)
    assert ours == {LEEDS: ["cafe", "pub"]}
    # An analyst re-imports one of the pairs by hand while our run is still reading.
    analyst = store.force_request([(LEEDS, "cafe")], NOW + SECOND)
    written = store.write_import(
        run_for([(LEEDS, "cafe"), (LEEDS, "pub")]), RELEASE, places_table([]), NOW + 2 * SECOND, stamp=NOW
    )
    assert written.rows == {(LEEDS, "cafe"): 0, (LEEDS, "pub"): 0}
    assert written.replaced_marks == {(LEEDS, "cafe"): analyst}
    assert imports_table(store)[(LEEDS, "cafe")] == (RELEASE, 0, NOW + 2 * SECOND)


def test_a_write_without_a_stamp_replaces_every_mark_on_its_way_but_not_a_failed_one(store):
    store.force_request([(LEEDS, "cafe")], NOW)
    store.force_request([(LEEDS, "pub")], NOW - timedelta(hours=IMPORT_HOURS) - SECOND)
    written = store.write_import(run_for([(LEEDS, "cafe"), (LEEDS, "pub")]), RELEASE, places_table([]), NOW + SECOND)
    assert written.replaced_marks == {(LEEDS, "cafe"): NOW}
