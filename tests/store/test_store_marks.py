"""Asking for imports: the compare and set, the timeouts it restates, taking marks back, imports off."""

from __future__ import annotations

import copy
import logging
import random
import threading
from datetime import timedelta

import pytest
from store_helpers import NOW, RELEASE, imports_table, record_release

from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    REQUESTED,
    RETRY_DAYS,
    PointLocation,
    Targeting,
    areas_for,
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
    assert store.reserve({LEEDS: ["cafe", "pub", "cafe"]}, NOW, NOW) == {LEEDS: ["cafe", "pub"]}
    assert store.reserve({LEEDS: ["cafe", "pub"]}, NOW + SECOND, NOW + SECOND) == {}
    table = imports_table(store)
    assert table == {(LEEDS, "cafe"): (REQUESTED, 0, NOW), (LEEDS, "pub"): (REQUESTED, 0, NOW)}


def test_a_failed_import_blocks_retries_for_a_week(store):
    store.force_request([(LEEDS, "cafe")], NOW)
    for later in (timedelta(hours=1), timedelta(hours=IMPORT_HOURS) + SECOND, timedelta(days=RETRY_DAYS) - SECOND):
        assert store.reserve({LEEDS: ["cafe"]}, NOW + later, NOW + later) == {}
    after = NOW + timedelta(days=RETRY_DAYS) + SECOND
    assert store.reserve({LEEDS: ["cafe"]}, after, after) == {LEEDS: ["cafe"]}
    assert imports_table(store)[(LEEDS, "cafe")] == (REQUESTED, 0, after)


def test_a_real_release_blocks_for_thirty_five_days(store):
    record_release(store, [(LEEDS, "cafe")], NOW)
    for later in (timedelta(days=1), timedelta(days=FRESH_DAYS) - SECOND):
        assert store.reserve({LEEDS: ["cafe"]}, NOW + later, NOW + later) == {}
    after = NOW + timedelta(days=FRESH_DAYS) + SECOND
    assert store.reserve({LEEDS: ["cafe"]}, after, after) == {LEEDS: ["cafe"]}


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
    assert store.reserve(mine, NOW, NOW) == mine
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
            got = store.reserve(missing, NOW + timedelta(microseconds=i), NOW)
            won.extend((area, category) for area, categories in got.items() for category in categories)

    threads = [threading.Thread(target=reserve, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == len(set(won))
    assert set(won) == set(imports_table(store))


def _launcher(fail_on: int | None = None):
    launched = []

    def launch(run):
        if len(launched) + 1 == fail_on:
            raise RuntimeError("queue unavailable")
        launched.append(run)

    return launch, launched


def test_request_imports_launches_runs_and_counts_areas_to_come(store):
    launch, launched = _launcher()
    assert store.request_imports(THREE_CITIES, ["cafe"], launch, now=NOW) == 3
    assert launched == import_runs({area: ["cafe"] for area in areas_for(THREE_CITIES)}, areas_for(THREE_CITIES))
    assert all(row == (REQUESTED, 0, NOW) for row in imports_table(store).values())
    # An hour later the imports are on their way: nothing more is asked for, three areas still to come.
    later_launch, later_launched = _launcher()
    assert store.request_imports(THREE_CITIES, ["cafe"], later_launch, now=NOW + timedelta(hours=1)) == 3
    assert later_launched == []


def test_request_imports_launches_only_what_it_reserved(store):
    """Another caller reserves a pair between our read of place_imports and our compare and set."""
    rival_pair = ("cell:48.5,2", "cafe")
    racing = copy.copy(store)

    def import_rows_then_rival(areas, categories):
        rows = type(store).import_rows(racing, areas, categories)
        store.reserve({rival_pair[0]: [rival_pair[1]]}, NOW - SECOND, NOW)
        return rows

    racing.import_rows = import_rows_then_rival
    launch, launched = _launcher()
    assert racing.request_imports(THREE_CITIES, ["cafe"], launch, now=NOW) == 2
    assert [run.pairs for run in launched] == [(("cell:40,-4", "cafe"),), (("cell:53.5,-2", "cafe"),)]
    assert imports_table(store)[rival_pair] == (REQUESTED, 0, NOW - SECOND)


def test_a_failed_launch_takes_back_the_unsent_runs_and_raises(store):
    launch, launched = _launcher(fail_on=2)
    with pytest.raises(RuntimeError, match="queue unavailable"):
        store.request_imports(THREE_CITIES, ["cafe"], launch, now=NOW)
    assert len(launched) == 1
    assert imports_table(store) == {pair: (REQUESTED, 0, NOW) for pair in launched[0].pairs}
    # The next look asks again for exactly what was taken back.
    retry, retried = _launcher()
    assert store.request_imports(THREE_CITIES, ["cafe"], retry, now=NOW + SECOND) == 3
    assert len(retried) == 2


def test_imports_off_write_no_mark_and_warn(store, caplog):
    with caplog.at_level(logging.WARNING, logger="nakodo_dagster"):
        pending = store.request_imports(
            THREE_CITIES, ["cafe"], None, now=NOW, off_reason="NAKODO_OVERTURE_ROOT isn't set"
        )
    assert pending == 0
    assert imports_table(store) == {}
    assert [r.getMessage() for r in caplog.records] == [
        "3 areas of business listings not loaded: NAKODO_OVERTURE_ROOT isn't set"
    ]


def test_import_status_counts_each_state_per_category(store):
    record_release(store, [("cell:50,0", "cafe"), ("cell:50.5,0", "cafe")], NOW - timedelta(days=3))
    record_release(store, [("cell:51,0", "cafe")], NOW - timedelta(days=FRESH_DAYS + 2))
    store.force_request([("cell:52,0", "cafe")], NOW - timedelta(hours=1))
    store.force_request([("cell:53,0", "cafe"), ("cell:53,0", "pub")], NOW - timedelta(hours=IMPORT_HOURS + 1))
    assert store.import_status(NOW) == [
        ImportStatus(
            "cafe", fresh=2, coming=1, failed=1, stale=1, oldest_release_at=NOW - timedelta(days=FRESH_DAYS + 2)
        ),
        ImportStatus("pub", fresh=0, coming=0, failed=1, stale=0, oldest_release_at=None),
    ]
