"""What a tick works out again follows what changed, not the fleet: counted rows, not seconds."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from store_helpers import record_release

from nakodo_dagster.placement import PointLocation, Targeting, areas_for, block_key, first_area, parse_area_key
from nakodo_dagster.store import base as store_base

SECOND = timedelta(seconds=1)
CATEGORIES = ("bakery", "cafe", "pub", "restaurant")


def _fleet(store, count: int, seed: int) -> dict[int, Targeting]:
    """``count`` overlapping 25 km campaigns around Leeds, of two categories each."""
    rng = random.Random(seed)
    fleet = {}
    for number in range(count):
        targeting = Targeting(
            (PointLocation(53.8 + rng.uniform(-0.6, 0.6), -1.5 + rng.uniform(-1.0, 1.0), 25),),
            tuple(rng.sample(CATEGORIES, 2)),
        )
        fleet[store.add_campaign(f"campaign {number}", targeting)] = targeting
    return fleet


def _needing(fleet: dict[int, Targeting], pairs: set[tuple[str, str]]) -> set[tuple[int, str]]:
    """The (campaign, area) rows that need one of ``pairs``, worked out from the campaigns' targeting alone."""
    return {
        (campaign, area)
        for campaign, targeting in fleet.items()
        for area in areas_for(targeting)
        for category in targeting.categories
        if (area, category) in pairs
    }


def test_a_count_recounts_the_campaign_areas_of_the_pairs_that_changed_and_nothing_else(store):
    fleet = _fleet(store, 30, seed=1)
    start = datetime.now(UTC) + SECOND
    assert store.count_progress(start).active == len(fleet)
    needed = sorted({(area, category) for t in fleet.values() for area in areas_for(t) for category in t.categories})

    changed = set(random.Random(2).sample(needed, 7))
    store.force_request(changed, start + SECOND)
    count = store.count_progress(start + 2 * SECOND)

    assert count.recounted == len(_needing(fleet, changed)) > 0
    assert store.kept_progress() == store.search_progress(start + 2 * SECOND)
    assert store.count_progress(start + 3 * SECOND).recounted == 0, "nothing changed since"

    landed = set(random.Random(3).sample(sorted(changed), 3))
    for pair in landed:
        record_release(store, [pair], start + 4 * SECOND)
    assert store.count_progress(start + 5 * SECOND).recounted == len(_needing(fleet, landed))
    assert store.kept_progress() == store.search_progress(start + 5 * SECOND)


def test_a_campaign_whose_needs_changed_is_counted_whole_once(store):
    fleet = _fleet(store, 10, seed=4)
    start = datetime.now(UTC) + SECOND
    store.count_progress(start)
    campaign = next(iter(fleet))
    store.add_campaign_location(campaign, PointLocation(51.5, -0.1, 10))

    added = store.campaign(campaign).targeting
    assert store.count_progress(start + SECOND).recounted == len(areas_for(added))
    assert store.kept_progress() == store.search_progress(start + SECOND)


def test_a_count_after_a_big_change_moves_a_bounded_share_and_the_next_counts_catch_up(store, monkeypatch):
    monkeypatch.setattr(store_base, "PROGRESS_PAIRS_PER_COUNT", 3)
    fleet = _fleet(store, 12, seed=5)
    start = datetime.now(UTC) + SECOND
    store.count_progress(start)
    needed = sorted({(area, category) for t in fleet.values() for area in areas_for(t) for category in t.categories})
    changed = set(random.Random(6).sample(needed, 8))
    store.force_request(changed, start + SECOND)

    recounts = [store.count_progress(start + (2 + tick) * SECOND).recounted for tick in range(4)]

    # Three pairs' campaign areas a count: 8 pairs take three counts, then nothing is left.
    assert all(0 < recounted <= 3 * len(fleet) for recounted in recounts[:3]) and recounts[3] == 0
    assert sum(recounts) == len(_needing(fleet, changed))
    assert store.kept_progress() == store.search_progress(start + 6 * SECOND)


def test_the_import_look_works_out_again_only_the_blocks_whose_pairs_changed(store, monkeypatch):
    # A look reads again what changed within COMMIT_OVERLAP of the one before, on the store's clock: in a test that
    # takes seconds, the campaigns just added. Long after the writes, it reads only what changed since.
    monkeypatch.setattr(store_base, "COMMIT_OVERLAP", timedelta(0))
    fleet = _fleet(store, 20, seed=7)
    start = datetime.now(UTC) + SECOND
    blocks = {block_key(area) for t in fleet.values() for area in areas_for(t).values()}
    first = store.reserve_missing(start, max_runs=0)
    assert first.relined == len(blocks) > 2, "the first look lines every block up"

    pair = next((area, t.categories[0]) for t in fleet.values() for area in areas_for(t))
    store.force_request([pair], start + SECOND)
    again = store.reserve_missing(start + 2 * SECOND, max_runs=0)

    assert again.relined == 1
    assert again.missing_pairs == first.missing_pairs - 1
    assert store.reserve_missing(start + 3 * SECOND, max_runs=0).relined == 0
    assert block_key(parse_area_key(pair[0])) in blocks


def test_a_look_with_more_blocks_to_work_out_than_it_may_lines_up_every_first_block_first(store, monkeypatch):
    monkeypatch.setattr(store_base, "COMMIT_OVERLAP", timedelta(0))
    rng = random.Random(8)
    fleet = {}
    for number in range(6):
        centre = PointLocation(rng.uniform(40, 60), rng.uniform(-5, 25), 100)
        fleet[store.add_campaign(f"campaign {number}", Targeting((centre,), ("cafe",)))] = Targeting(
            (centre,), ("cafe",)
        )
    firsts = {block_key(first_area(targeting)) for targeting in fleet.values()}
    every = {block_key(area) for targeting in fleet.values() for area in areas_for(targeting).values()}
    assert len(every) > len(firsts)
    monkeypatch.setattr(store_base, "LINE_BLOCKS_PER_LOOK", len(firsts))
    start = datetime.now(UTC) + SECOND

    assert store.reserve_missing(start, max_runs=0).relined == len(firsts)

    blocks, lines = store.import_line(start)
    assert blocks == len(firsts)
    assert all(line.place is not None for line in lines), "every campaign's first block stands in line"
    assert store.reserve_missing(start + SECOND, max_runs=0).relined == min(len(firsts), len(every) - len(firsts))


def test_a_coverage_count_after_a_big_change_reads_a_bounded_share_and_the_next_counts_catch_up(store, monkeypatch):
    monkeypatch.setattr(store_base, "COMMIT_OVERLAP", timedelta(0))
    monkeypatch.setattr(store_base, "COUNT_PAIRS_PER_RANGE", 3)
    fleet = _fleet(store, 12, seed=9)
    start = datetime.now(UTC) + SECOND
    assert store.coverage(start, 0).counts["coming"] == 0
    needed = sorted({(area, category) for t in fleet.values() for area in areas_for(t) for category in t.categories})
    changed = random.Random(10).sample(needed, 8)
    for number, pair in enumerate(changed):
        store.force_request([pair], start + SECOND + number * timedelta(milliseconds=1))

    counts = [store.coverage(start + (2 + tick) * SECOND, 0) for tick in range(4)]

    # Three asked-for pairs a count, oldest first: 8 take three counts, and the kept counts then hold them all.
    assert [count.recounted for count in counts] == [3, 3, 2, 0]
    assert [count.counts["coming"] for count in counts] == [3, 6, 8, 8]
    assert counts[-1].counts["missing"] == len(needed) - len(changed)
