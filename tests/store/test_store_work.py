"""What a tick works out again follows what changed, not the fleet: counted rows, not seconds."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

from store_helpers import kept_progress, record_release

from nakodo_dagster.placement import (
    PointLocation,
    Targeting,
    areas_for,
    block_key,
    first_area,
    parse_area_key,
    run_block,
)
from nakodo_dagster.store import admission, coverage, progress, shared

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
    assert kept_progress(store) == store.search_progress(start + 2 * SECOND)
    assert store.count_progress(start + 3 * SECOND).recounted == 0, "nothing changed since"

    landed = set(random.Random(3).sample(sorted(changed), 3))
    for pair in landed:
        record_release(store, [pair], start + 4 * SECOND)
    assert store.count_progress(start + 5 * SECOND).recounted == len(_needing(fleet, landed))
    assert kept_progress(store) == store.search_progress(start + 5 * SECOND)


def test_a_campaign_whose_needs_changed_is_counted_whole_once(store):
    fleet = _fleet(store, 10, seed=4)
    start = datetime.now(UTC) + SECOND
    store.count_progress(start)
    campaign = next(iter(fleet))
    store.add_campaign_location(campaign, PointLocation(51.5, -0.1, 10))

    added = store.campaign(campaign).targeting
    assert store.count_progress(start + SECOND).recounted == len(areas_for(added))
    assert kept_progress(store) == store.search_progress(start + SECOND)


def test_a_count_after_a_big_change_moves_a_bounded_share_and_the_next_counts_catch_up(store, monkeypatch):
    monkeypatch.setattr(progress, "PROGRESS_PAIRS_PER_COUNT", 3)
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
    assert kept_progress(store) == store.search_progress(start + 6 * SECOND)


def test_the_import_look_works_out_again_only_the_blocks_whose_pairs_changed(store, monkeypatch):
    # A look reads again what changed within COMMIT_OVERLAP of the one before, on the store's clock: in a test that
    # takes seconds, the campaigns just added. Long after the writes, it reads only what changed since.
    monkeypatch.setattr(shared, "COMMIT_OVERLAP", timedelta(0))
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
    monkeypatch.setattr(shared, "COMMIT_OVERLAP", timedelta(0))
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
    monkeypatch.setattr(admission, "LINE_BLOCKS_PER_LOOK", len(firsts))
    start = datetime.now(UTC) + SECOND

    assert store.reserve_missing(start, max_runs=0).relined == len(firsts)

    blocks, lines = store.import_line(start)
    assert blocks == len(firsts)
    assert all(line.place is not None for line in lines), "every campaign's first block stands in line"
    assert store.reserve_missing(start + SECOND, max_runs=0).relined == min(len(firsts), len(every) - len(firsts))


def _fair_line(fleet: dict[int, Targeting], account_of: dict[int, int], loaded: set[tuple[str, str]]) -> list[str]:
    """The blocks missing a pair in fair-share order, worked out from the campaigns' targeting alone: each account's
    blocks by its campaigns' first pairs, then its oldest campaign; the accounts' turns; a block at its best turn."""
    demand: dict[tuple[str, int], tuple[int, int | None]] = {}
    for campaign, targeting in sorted(fleet.items()):
        first_pair = (first_area(targeting).key, targeting.categories[0])
        for key, area in areas_for(targeting).items():
            for category in targeting.categories:
                if (key, category) in loaded:
                    continue
                place = (block_key(area), account_of[campaign])
                oldest, first_of = demand.get(place, (campaign, None))
                if first_of is None and (key, category) == first_pair:
                    first_of = campaign
                demand[place] = (oldest, first_of)
    best: dict[str, tuple[int, bool, int]] = {}
    for account in set(account_of.values()):
        mine = sorted(
            (first_of is None, first_of if first_of is not None else oldest, block)
            for (block, owner), (oldest, first_of) in demand.items()
            if owner == account
        )
        for turn, (no_first, _, block) in enumerate(mine, start=1):
            turn_of, first_block, owner = best.get(block, (turn, False, account))
            best[block] = (min(turn, turn_of), first_block or not no_first, min(owner, account))
    return sorted(best, key=lambda block: (best[block][0], not best[block][1], best[block][2], block))


def test_the_kept_line_after_some_pairs_landed_is_the_fair_line_worked_out_afresh(store, monkeypatch):
    # Blocks whose pairs all miss and blocks where some landed are worked out again in two ways (whole, and pair by
    # pair): both must leave the line a look from scratch would, in order and pair for pair.
    monkeypatch.setattr(shared, "COMMIT_OVERLAP", timedelta(0))
    accounts = [store.add_account(f"account {number}", "unlimited") for number in range(3)]
    rng = random.Random(11)
    fleet, account_of = {}, {}
    # A campaign in three wants only what lands below: where it did, the campaign misses nothing.
    kinds = (("cafe", "pub"), ("bakery", "cafe"), ("restaurant", "bakery"))
    for number in range(30):
        targeting = Targeting((PointLocation(rng.uniform(50, 58), rng.uniform(-6, 2), 25),), kinds[number % 3])
        account = accounts[number // 2 % 3]
        campaign = store.add_campaign(f"campaign {number}", targeting, account_id=account)
        fleet[campaign], account_of[campaign] = targeting, account
    start = datetime.now(UTC) + SECOND
    store.reserve_missing(start, max_runs=0)

    needed = {(key, c) for t in fleet.values() for key in areas_for(t) for c in t.categories}
    block_of = {key: block_key(parse_area_key(key)) for key, _ in needed}
    by_block = sorted(set(block_of.values()))
    # Every other block's cafes and pubs land, and the whole of the first block.
    loaded = {(key, c) for key, c in needed if c in ("cafe", "pub") and by_block.index(block_of[key]) % 2}
    loaded |= {(key, c) for key, c in needed if block_of[key] == by_block[0]}
    for block in by_block:
        if landed := {(key, c) for key, c in loaded if block_of[key] == block}:
            record_release(store, landed, start + SECOND)
    line = _fair_line(fleet, account_of, loaded)
    assert 0 < len(line) < len(by_block)

    reserved = store.reserve_missing(start + 2 * SECOND, max_runs=len(by_block))

    assert reserved.relined > 0
    assert [run_block(run) for run in reserved.runs] == line
    assert {pair for run in reserved.runs for pair in run.pairs} == needed - loaded


def test_a_coverage_count_after_a_big_change_reads_a_bounded_share_and_the_next_counts_catch_up(store, monkeypatch):
    monkeypatch.setattr(shared, "COMMIT_OVERLAP", timedelta(0))
    monkeypatch.setattr(coverage, "COUNT_PAIRS_PER_RANGE", 3)
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
