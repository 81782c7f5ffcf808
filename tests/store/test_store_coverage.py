"""Coverage counts the pairs active campaigns need, each once, by the same rule as needs and status, and lists
the oldest of each state; pairs no active campaign needs are not counted at all."""

from __future__ import annotations

from datetime import timedelta

from store_helpers import NOW, RELEASE, record_release

from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    REQUESTED,
    RETRY_DAYS,
    Cutoffs,
    PointLocation,
    Targeting,
    areas_for,
)
from nakodo_dagster.store import Store
from nakodo_dagster.store.models import NeededPair

# A 2 km circle inside one cell: one area, so each category is exactly one pair.
LEEDS = PointLocation(53.75, -1.75, 2)
YORK = PointLocation(53.96, -1.08, 2)


def _area(location: PointLocation) -> str:
    (area,) = areas_for(Targeting((location,), ("cafe",)))
    return area


def test_each_needed_pair_is_counted_once_in_its_state_and_the_rest_not_at_all(store: Store):
    leeds, york = _area(LEEDS), _area(YORK)
    store.add_campaign("Leeds cafes and pubs", Targeting((LEEDS,), ("cafe", "pub", "bakery", "bar")))
    # A second campaign sharing Leeds' cafes: the pair is still one pair.
    store.add_campaign("Leeds cafes", Targeting((LEEDS,), ("cafe",)))
    paused = store.add_campaign("York", Targeting((YORK,), ("cafe",)))
    store.set_campaign_status(paused, "paused")

    record_release(store, [(leeds, "cafe")], NOW - timedelta(days=1))
    # On its way, failed (within its week) and a stale release (past 35 days).
    store.force_request([(leeds, "pub")], NOW - timedelta(hours=IMPORT_HOURS - 1))
    store.force_request([(leeds, "bakery")], NOW - timedelta(days=RETRY_DAYS - 1))
    record_release(store, [(leeds, "bar")], NOW - timedelta(days=FRESH_DAYS + 1))
    # Loaded, but only a paused campaign needs it: not a problem, not counted.
    record_release(store, [(york, "cafe")], NOW - timedelta(days=FRESH_DAYS + 1))

    coverage = store.coverage(NOW, listed=10)

    assert coverage.counts == {"fresh": 1, "coming": 1, "failed": 1, "missing": 1}
    assert {(p.area, p.category, p.state) for p in coverage.listed} == {
        (leeds, "cafe", "fresh"),
        (leeds, "pub", "coming"),
        (leeds, "bakery", "failed"),
        (leeds, "bar", "missing"),
    }
    (stale,) = [p for p in coverage.listed if p.state == "missing"]
    assert (stale.release, stale.imported_at) == (RELEASE, NOW - timedelta(days=FRESH_DAYS + 1))


def test_counts_stay_whole_when_the_list_is_cut_and_never_asked_for_pairs_come_first(store: Store):
    categories = ("bakery", "bar", "cafe", "pub")
    store.add_campaign("Leeds", Targeting((LEEDS,), categories))
    leeds = _area(LEEDS)
    record_release(store, [(leeds, "pub")], NOW - timedelta(days=FRESH_DAYS + 2))

    coverage = store.coverage(NOW, listed=2)

    assert coverage.counts == {"fresh": 0, "coming": 0, "failed": 0, "missing": 4}
    assert coverage.listed == [
        NeededPair(leeds, "bakery", "missing", None, None),
        NeededPair(leeds, "bar", "missing", None, None),
    ]
    assert store.coverage(NOW, listed=0).listed == []


def test_no_active_campaign_is_full_coverage_of_nothing(store: Store):
    assert store.coverage(NOW, listed=5).counts == {"fresh": 0, "coming": 0, "failed": 0, "missing": 0}


SECOND = timedelta(seconds=1)
# A second either side of every boundary of the rule, and on it.
BOUNDARY_AGES = [
    edge + offset
    for edge in (timedelta(hours=IMPORT_HOURS), timedelta(days=RETRY_DAYS), timedelta(days=FRESH_DAYS))
    for offset in (-SECOND, timedelta(0), SECOND)
]


def test_each_pair_reads_as_the_one_rule_reads_it_at_every_boundary(store: Store):
    categories = [f"c{i}" for i in range(2 * len(BOUNDARY_AGES))]
    store.add_campaign("Leeds", Targeting((LEEDS,), tuple(categories)))
    leeds = _area(LEEDS)
    rows = {}
    for i, age in enumerate(BOUNDARY_AGES):
        mark, release = categories[2 * i], categories[2 * i + 1]
        store.force_request([(leeds, mark)], NOW - age)
        record_release(store, [(leeds, release)], NOW - age)
        rows[mark], rows[release] = (REQUESTED, NOW - age), (RELEASE, NOW - age)

    coverage = store.coverage(NOW, listed=len(categories))

    cutoffs = Cutoffs.at(NOW)
    assert {p.category: p.state for p in coverage.listed} == {c: cutoffs.state(*rows[c]) for c in categories}
