"""What changed since a moment: the sensors look again only at campaigns and pairs that changed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from store_helpers import kept_progress, record_release

from nakodo_dagster.placement import FRESH_DAYS, RETRY_DAYS, PointLocation, Targeting

SECOND = timedelta(seconds=1)
LEEDS_CELL, PARIS_CELL = "cell:53.5,-2", "cell:48.5,2"
LEEDS = Targeting((PointLocation(53.75, -1.75, 2),), ("cafe",))
PARIS = Targeting((PointLocation(48.75, 2.25, 2),), ("cafe",))


def test_a_change_that_leaves_no_trace_in_place_imports_is_noted(store):
    store.add_campaign("Leeds", LEEDS)
    stamp = store.force_request([(LEEDS_CELL, "cafe")], datetime.now(UTC))
    quiet = datetime.now(UTC) + SECOND
    assert not store.needs_changed_since(quiet, quiet + SECOND)

    before = datetime.now(UTC)
    assert store.take_back([(LEEDS_CELL, "cafe")], stamp) == 1

    assert store.needs_changed_since(before, datetime.now(UTC))


def test_a_release_or_a_failed_mark_aging_into_missing_is_seen(store):
    start = datetime.now(UTC) + SECOND
    record_release(store, [(LEEDS_CELL, "cafe")], start - timedelta(days=FRESH_DAYS) + 10 * SECOND)
    store.force_request([(PARIS_CELL, "cafe")], start - timedelta(days=RETRY_DAYS) + 30 * SECOND)

    assert not store.needs_changed_since(start, start + 5 * SECOND), "nothing crossed yet"
    assert store.needs_changed_since(start, start + 20 * SECOND), "the release is 35 days old"
    assert store.needs_changed_since(start + 20 * SECOND, start + 40 * SECOND), "the failed mark is 7 days old"
    assert not store.needs_changed_since(start + 40 * SECOND, start + 60 * SECOND)


def test_progress_is_recounted_only_for_the_campaigns_whose_pairs_changed(store):
    store.add_campaign("Leeds", LEEDS)
    store.add_campaign("Paris", PARIS)
    start = datetime.now(UTC) + SECOND  # after both campaigns were noted

    count = store.count_progress(start)
    assert (count.active, count.recounted) == (2, 0), "the first count: no area has a pair asked for"
    assert store.count_progress(start + SECOND).recounted == 0, "nothing changed"

    store.force_request([(LEEDS_CELL, "cafe")], start + 2 * SECOND)
    assert store.count_progress(start + 3 * SECOND).recounted == 1, "Leeds' area alone"
    progress = kept_progress(store)
    assert progress == store.search_progress(start + 3 * SECOND)
    assert [(p.name, p.coming, p.missing) for p in progress] == [("Leeds", 1, 0), ("Paris", 0, 1)]

    record_release(store, [(PARIS_CELL, "cafe")], start - timedelta(days=FRESH_DAYS) + 10 * SECOND)
    # Loaded long ago: counted once as a stale release, moved by nothing after, until a fresh one lands.
    assert store.count_progress(start + 20 * SECOND).recounted == 1
    progress = kept_progress(store)
    assert progress == store.search_progress(start + 20 * SECOND)
    assert progress[1].missing == 1 and progress[1].arrived_at is not None

    store.set_campaign_status(progress[1].campaign_id, "paused")
    count = store.count_progress(start + 30 * SECOND)
    assert [p.name for p in kept_progress(store)] == ["Leeds"], "a paused campaign is neither counted nor searched"
    assert count.active == 1 and [p.name for p in count.maybe_due] == ["Leeds"]

    store.set_campaign_status(progress[1].campaign_id, "active")
    assert store.count_progress(start + 40 * SECOND).recounted == 1, "resumed: Paris counted whole, its one area"
    assert kept_progress(store) == store.search_progress(start + 40 * SECOND)
