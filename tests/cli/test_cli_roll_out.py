"""`nakodo imports roll-out` as a user runs it: a newer release under the root, pairs moved to it on demand, and
`imports status` saying how far it has reached; bad input refused with one message, exit 2, nothing written."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from overture_helpers import CURRENT, PREVIOUS
from store_helpers import places_table

from nakodo_dagster.placement import FRESH_DAYS, PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.store import Store, open_store

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe", "pub"))


@pytest.fixture
def loaded(environment, database_url) -> tuple[Store, int, datetime]:
    """Leeds' cafes and pubs loaded from the previous release three days ago: fresh, and on an older release than
    the root's newest."""
    store = open_store(database_url)
    store.migrate()
    campaign_id = store.add_campaign("Leeds", LEEDS)
    loaded_at = datetime.now(UTC) - timedelta(days=3)
    areas = areas_for(LEEDS)
    for run in import_runs({key: list(LEEDS.categories) for key in areas}, areas):
        store.write_import(run, PREVIOUS, places_table([]), loaded_at)
    return store, campaign_id, loaded_at


def _place_imports(store: Store) -> list[tuple]:
    return sorted(
        store._transact(lambda tx: tx.rows("SELECT area, category, release, imported_at, roll_out FROM place_imports"))
    )


def test_a_category_moves_to_the_newest_release_now(nakodo, loaded, release_root):
    store, _, loaded_at = loaded
    pairs = len(areas_for(LEEDS)) * len(LEEDS.categories)
    root = {"NAKODO_OVERTURE_ROOT": str(release_root)}

    before = nakodo("imports", "status", **root)
    last = loaded_at + timedelta(days=FRESH_DAYS)
    assert f"Release {CURRENT}: 0 of {pairs} loaded pairs on it; at the {FRESH_DAYS}-day pace" in before.stdout
    assert f"the last pair moves by {last:%Y-%m-%d %H:%M} UTC" in before.stdout

    moved = nakodo("imports", "roll-out", "newest", "--category", "pub", **root)

    pubs = len(areas_for(LEEDS))
    assert f"Asked {pubs} pairs to move to release {CURRENT} now" in moved.stdout
    asked = {(area, category) for area, category, _, _, roll_out in _place_imports(store) if roll_out == CURRENT}
    assert asked == {(area, "pub") for area in areas_for(LEEDS)}
    after = nakodo("imports", "status", **root)
    assert f"0 of {pairs} loaded pairs on it; {pubs} asked to move now" in after.stdout
    again = nakodo("imports", "roll-out", CURRENT, "--category", "pub", **root)
    assert f"No pair to move to release {CURRENT}" in again.stdout


def test_bad_input_is_refused_with_one_message_and_nothing_written(nakodo_here, loaded, release_root, tmp_path):
    store, campaign_id, _ = loaded
    root = {"NAKODO_OVERTURE_ROOT": str(release_root)}
    before = _place_imports(store)
    refused = [
        (["newest"], "exactly one of a campaign, a category or all", root),
        (["newest", "--all", "--category", "pub"], "exactly one of", root),
        (["2026-13-01.0", "--all"], "release '2026-13-01.0' is not allowed", root),
        (["latest", "--all"], "release 'latest' is not allowed", root),
        ([PREVIOUS, "--all"], f"release '{PREVIOUS}' is not under", root),
        (["newest", "--category", "Pubs!"], "category 'Pubs!' is not allowed", root),
        (["newest", "--campaign", str(campaign_id + 1)], f"campaign {campaign_id + 1} does not exist", root),
        (["newest", "--all"], "imports are off (NAKODO_OVERTURE_ROOT isn't set)", {}),
        (["newest", "--all"], "is not a folder", {"NAKODO_OVERTURE_ROOT": str(tmp_path / "nowhere")}),
    ]
    for args, message, variables in refused:
        done = nakodo_here("imports", "roll-out", *args, expect=2, **variables)
        assert message in done.stderr, (args, done.stderr)
        assert done.stderr.count("Error") == 1 and "Traceback" not in done.stderr, done.stderr
    assert _place_imports(store) == before
