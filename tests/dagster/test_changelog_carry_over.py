"""A new release with its changelog, end to end: campaigns imported from one sample release, then a month on from
the next, whose GERS changelog sits beside the releases as Overture keeps it. The import sensor's runs move to the
new release without reading it exactly the pairs an independent diff of the two releases (pyarrow, row by row) says
nothing touched, read the rest, and leave every pair holding exactly what a full read of the new release holds."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pyarrow.dataset as ds
import pytest
from dagster_helpers import import_as_the_sensor_asks
from overture_helpers import CURRENT, PREVIOUS, write_release_change

from bench.independent import expected_rows
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.placement import FRESH_DAYS, ImportRun, PointLocation, Targeting
from nakodo_dagster.resources import StoreResource

# Around Paris, wide: busy cells in the city, quiet ones in the country around it where a month changes nothing.
PARIS = Targeting((PointLocation(48.8566, 2.3522, 100),), ("bakery", "pub"))


@pytest.fixture(scope="module")
def bucket(tmp_path_factory) -> Path:
    """Overture's layout: PREVIOUS and CURRENT under release/, CURRENT's changelog under changelog/."""
    sample = {"rows": 20_000, "files": 4, "row_group_rows": 500, "seed": 7, "progress": False}
    return write_release_change(tmp_path_factory.mktemp("bucket"), **sample)


def _by_id(root: Path, release: str) -> dict[str, dict]:
    table = ds.dataset(root / release / "theme=places" / "type=place", format="parquet").to_table()
    return {row["id"]: row for row in table.to_pylist()}


def _cell(row: dict) -> str:
    box = row["bbox"]
    return f"cell:{math.floor(box['ymin'] * 2) / 2:g},{math.floor(box['xmin'] * 2) / 2:g}"


def _untouched_pairs(root: Path, runs: list[ImportRun]) -> set[tuple[str, str]]:
    """The pairs nothing touched from PREVIOUS to CURRENT, from the two releases alone: no place of any category
    added to or changed in their cell, and none of their own places gone."""
    before, after = _by_id(root, PREVIOUS), _by_id(root, CURRENT)
    touched_cells = {_cell(row) for id_, row in after.items() if before.get(id_) != row}
    gone = before.keys() - after.keys()
    untouched = set()
    for run in runs:
        held = expected_rows(root, PREVIOUS, run)
        for area, category in run.pairs:
            own = {row[0] for row in held if (row[10], row[2]) == (area, category)}
            if area not in touched_cells and not own & gone:
                untouched.add((area, category))
    return untouched


def _ids(store, area: str, category: str) -> tuple[set[str], set[str]]:
    rows = store._transact(
        lambda tx: tx.rows("SELECT id, release FROM places WHERE area = $a AND category = $c", a=area, c=category)
    )
    return {row[0] for row in rows}, {row[1] for row in rows}


def _carried_over(instance, run_ids: list[str]) -> set[tuple[str, str]]:
    """The pairs whose materialisation in these runs says they were carried over, not read."""
    carried = set()
    for run_id in run_ids:
        for record in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION):
            materialization = record.get_dagster_event().event_specific_data.materialization
            if "carried_over" in materialization.metadata:
                area, category = materialization.partition.split("|")
                carried.add((area, category))
    return carried


def _latest_observation(instance) -> dict:
    record = instance.fetch_observations(PLACES, limit=1).records[0]
    return record.asset_observation.metadata


def _releases_seen(instance) -> dict:
    metadata = _latest_observation(instance)
    return {key: metadata[key].value for key in ("newest_release", "newest_release_pairs")}


def test_pairs_nothing_touched_move_to_the_new_release_unread_and_hold_what_a_full_read_holds(
    instance, database_url, bucket
):
    store_resource = StoreResource(database=database_url)
    store = store_resource.store
    store.add_campaign("Around Paris", PARIS)
    now = datetime.now(UTC)
    root = bucket / "release"

    first = import_as_the_sensor_asks(instance, store_resource, root, PREVIOUS, now)
    assert first and all(result.success for result in first)
    runs = [ImportRun.from_payload(import_payload(r.dagster_run.run_config)) for r in first]
    pairs = [pair for run in runs for pair in run.pairs]

    assert _releases_seen(instance) == {"newest_release": PREVIOUS, "newest_release_pairs": len(pairs)}

    later = import_as_the_sensor_asks(instance, store_resource, root, CURRENT, now + timedelta(days=FRESH_DAYS + 1))
    assert later and all(result.success for result in later)
    # The places page shows the new release reached every pair, and none is left on the old one.
    assert _releases_seen(instance) == {"newest_release": CURRENT, "newest_release_pairs": len(pairs)}
    assert _latest_observation(instance)["pairs_on_older_releases"].value == 0

    untouched = _untouched_pairs(root, runs)
    assert 0 < len(untouched) < len(pairs)
    assert _latest_observation(instance)["newest_release_carried_over"].value == len(untouched)
    assert _carried_over(instance, [r.run_id for r in later]) == untouched
    # Carried over or read, every pair holds exactly what a full read of the new release gives it, as of it.
    for run in runs:
        full = expected_rows(root, CURRENT, run)
        for area, category in run.pairs:
            ids, releases = _ids(store, area, category)
            assert ids == {row[0] for row in full if (row[10], row[2]) == (area, category)}, (area, category)
            assert releases <= {CURRENT}
    assert {row.release for row in store.import_rows(*zip(*pairs, strict=True))} == {CURRENT}
