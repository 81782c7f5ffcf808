"""One business once, end to end over three months: campaigns around Paris imported from a sample release, searched,
then imported a month on from the next release (its GERS changelog beside it, as Overture keeps it), searched, and
again a month later. Each month a share of the places goes and as many new ones come, some are edited and some come
back under new ids at the same spot. After every search the campaign lists each business once, under its newest id,
marked with the release it left; checked against an independent reading of the three releases' files and their
changelogs alone (pyarrow, row by row; bench.independent), not the store's matching of names and distances.

One campaign searches after every import, the other misses the second month's search and ends the same for the
businesses both found."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from dagster_helpers import import_as_the_sensor_asks
from geographiclib.geodesic import Geodesic
from overture_helpers import CURRENT, PREVIOUS

from bench.independent import campaign_businesses, expected_rows
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.overture.sample import ReleaseDrift, write_sample_release
from nakodo_dagster.overture.sample.changelog import changelog_folder
from nakodo_dagster.placement import FRESH_DAYS, ImportRun, PointLocation, Targeting
from nakodo_dagster.resources import StoreResource

RELEASES = ("2026-09-17.0", PREVIOUS, CURRENT)
# Each month: 3 % of the places gone and as many new, 2 % of those kept edited, 10 % kept under a new id (some
# twice: the second month follows the first).
MONTH = ReleaseDrift(churn=0.03, edited=0.02, reissued=0.1)
SAMPLE = {"rows": 20_000, "files": 4, "row_group_rows": 500, "seed": 7, "progress": False}
# Paris's busy cells: four cells, four categories (restaurant takes in its kinds).
CENTRE = PointLocation(48.8566, 2.3522, 25)
PARIS = Targeting((CENTRE,), ("cafe", "restaurant", "bakery", "pub"))


@pytest.fixture(scope="module")
def bucket(tmp_path_factory) -> Path:
    """Overture's layout: the three releases under release/, the second's and third's changelogs under changelog/,
    each against the month before."""
    bucket = tmp_path_factory.mktemp("bucket")
    for month, release in enumerate(RELEASES):
        changelog = bucket / "changelog" if month else None
        write_sample_release(
            bucket / "release", release=release, drift=[MONTH] * month, changelog_root=changelog, **SAMPLE
        )
    return bucket


class History:
    """The campaigns' places month by month, from the releases' files and changelogs alone.

    A business is a chain of ids: a changelog's removed row and added row with the identical box are one place
    reissued under a new id. Each month, a business is in the campaigns' pairs under the id it has in that release,
    or not (gone, or below what the reader keeps); it is within reach, out of it, or too near the circle's edge to
    call (``unclear``: its place does not move from month to month)."""

    def __init__(self, bucket: Path, runs: list[ImportRun]) -> None:
        self.business: dict[str, str] = {}
        self.reissued = 0
        for release in RELEASES[1:]:
            removed, added = (_boxes(bucket / "changelog" / release, kind) for kind in ("removed", "added"))
            for box in removed.keys() & added.keys():
                old, new = removed[box], added[box]
                self.business[new] = self.business.get(old, old)
                self.reissued += 1
        # Per month: each business in the pairs, by its id then; and where each id is and what it is called.
        self.present: list[dict[str, str]] = []
        self.rows: dict[str, tuple] = {}
        inside, edge = set(), set()
        for release in RELEASES:
            rows = {row[0]: row for run in runs for row in expected_rows(bucket / "release", release, run)}
            self.rows |= rows
            self.present.append({self.of(id_): id_ for id_ in rows})
            assert len(self.present[-1]) == len(rows), f"two ids of one business in {release}"
            surely, near_edge = campaign_businesses(rows.values(), PARIS)
            inside |= {self.of(id_) for id_ in surely}
            edge |= {self.of(id_) for id_ in near_edge}
        self.unclear = edge
        self.inside = inside - edge

    def of(self, id_: str) -> str:
        """The business an id is (the id it was first seen under)."""
        return self.business.get(id_, id_)

    def expected(self, searched: list[int], month: int) -> dict[str, str | None]:
        """What a campaign searched after the releases of ``searched`` (months, the last ``month``) lists: each
        business it found within reach, under its id in the last release that had it, and the release it left
        (None: in this month's release, whether it stayed or came back)."""
        expected = {}
        for business in self.inside:
            if not any(business in self.present[m] for m in searched):
                continue
            last = max(m for m in range(month + 1) if business in self.present[m])
            expected[self.present[last][business]] = None if last == month else RELEASES[last + 1]
        return expected

    def explain(self, id_: str) -> str:
        business = self.of(id_)
        months = [self.present[m].get(business, "-") for m in range(len(RELEASES))]
        row = self.rows.get(id_)
        if row is None:
            return f"{id_}: never in the pairs' rows"
        km = Geodesic.WGS84.Inverse(CENTRE.lat, CENTRE.lng, row[3], row[4])["s12"] / 1000
        return f"{id_} {row[1]!r} ({row[2]}, {row[10]}, {km:.3f} km): ids by month {months}"


def _boxes(release_changelog: Path, kind: str) -> dict[tuple, str]:
    """A kind of change's rows by box; a box held twice is no reissue anyone can tell (none in the sample)."""
    table = ds.dataset(changelog_folder(release_changelog, kind), format="parquet").to_table()
    bbox = table["bbox"]
    keys = zip(*(pc.struct_field(bbox, f).to_pylist() for f in ("xmin", "xmax", "ymin", "ymax")), strict=True)
    boxes = dict(zip(keys, table["id"].to_pylist(), strict=True))
    assert len(boxes) == len(table), f"{kind}: one box, two ids"
    return boxes


def _check(store, campaign: int, history: History, searched: list[int]) -> None:
    results = store.campaign_results(campaign)
    got = {row["id"]: row["removed_in"] for row in results}
    # Never counted twice: one row per id, and one per business.
    assert len(got) == len(results) == len({history.of(id_) for id_ in got}), "a business listed twice"
    clear = {id_: removed_in for id_, removed_in in got.items() if history.of(id_) not in history.unclear}
    expected = history.expected(searched, searched[-1])
    if clear != expected:
        lines = [f"after searching {[RELEASES[m] for m in searched]}:"]
        for id_ in sorted(clear.keys() | expected.keys()):
            if clear.get(id_, "absent") != expected.get(id_, "absent"):
                lines.append(
                    f"  store {clear.get(id_, 'absent')!s:>12}  expected {expected.get(id_, 'absent')!s:>12}  "
                    + history.explain(id_)
                )
        pytest.fail("\n".join(lines))


def test_campaigns_list_each_business_once_under_its_newest_id_across_three_releases(instance, database_url, bucket):
    store_resource = StoreResource(database=database_url)
    store = store_resource.store
    every = store.add_campaign("Paris every month", PARIS)
    missed = store.add_campaign("Paris missed a month", PARIS)
    searched: dict[int, list[int]] = {every: [], missed: []}
    start, history = datetime.now(UTC), None
    for month, release in enumerate(RELEASES):
        # A month on, the sensor reads again the pairs it read a month before.
        results = import_as_the_sensor_asks(
            instance, store_resource, bucket / "release", release, start + month * timedelta(FRESH_DAYS + 1)
        )
        assert results and all(result.success for result in results)
        metadata = instance.fetch_observations(PLACES, limit=1).records[0].asset_observation.metadata
        assert metadata["newest_release"].value == release
        assert metadata["pairs_on_older_releases"].value == 0, "a pair held at the drift gate"
        if history is None:
            runs = [ImportRun.from_payload(import_payload(r.dagster_run.run_config)) for r in results]
            history = History(bucket, runs)
        for campaign in (every, missed):
            if campaign == missed and month == 1:
                continue
            store.add_campaign_businesses(campaign, datetime.now(UTC))
            searched[campaign].append(month)
            _check(store, campaign, history, searched[campaign])

    # The months did what the test is about: places reissued, gone and new within reach, and a campaign listing
    # fewer rows than the ids it has seen.
    final = history.expected(searched[every], 2)
    assert Counter(final.values())[None] > 100
    assert {RELEASES[1], RELEASES[2]} <= set(final.values())
    ids = Counter(
        len({history.present[m][business] for m in range(3) if business in history.present[m]})
        for business in history.inside
    )
    assert ids[2] > 10 and ids[3] > 0, ids
