"""Months of a sample release shaped as Overture's (``OVERTURE_MONTH``), checked from the files alone with pyarrow
and WGS84 geodesics: places reissued at the same spot, moved 80 to 150 m and spelled another way with their source
record unchanged, reissued citing another dataset, closed for good, split in two, listed twice and merged back."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from geographiclib.geodesic import Geodesic

from nakodo_dagster.cli.samples import sample_release
from nakodo_dagster.overture.sample import OVERTURE_MONTH, write_sample_release

MONTHS = ("2026-09-17.0", "2026-10-15.0", "2026-11-18.0")
SAMPLE = {"rows": 8_000, "files": 2, "row_group_rows": 400, "seed": 5, "progress": False}


def _places(root, release) -> dict[str, dict]:
    table = ds.dataset(root / release / "theme=places" / "type=place", format="parquet").to_table(
        columns=["id", "bbox", "names", "sources", "operating_status"]
    )
    return {row["id"]: row for row in table.to_pylist()}


def _records(place: dict) -> set[tuple[str, str]]:
    return {(source["dataset"], source["record_id"]) for source in place["sources"]}


def _metres(a: dict, b: dict) -> float:
    return Geodesic.WGS84.Inverse(a["bbox"]["ymin"], a["bbox"]["xmin"], b["bbox"]["ymin"], b["bbox"]["xmin"])["s12"]


@pytest.fixture(scope="module")
def months(tmp_path_factory) -> list[dict[str, dict]]:
    root = tmp_path_factory.mktemp("release")
    for month, release in enumerate(MONTHS):
        write_sample_release(root, release=release, drift=[OVERTURE_MONTH] * month, **SAMPLE)
    return [_places(root, release) for release in MONTHS]


def _reissues(before: dict[str, dict], after: dict[str, dict]) -> list[tuple[dict, list[dict]]]:
    """Each place gone, with the new places that cite one of its source records."""
    citing = defaultdict(list)
    for id_, place in after.items():
        if id_ not in before:
            for record in _records(place):
                citing[record].append(place)
    return [
        (place, [new for record in _records(place) for new in citing[record]])
        for id_, place in before.items()
        if id_ not in after
    ]


def test_a_month_reissues_moves_respells_and_recites_as_overture_does(months):
    first, second = months[0], months[1]
    reissues = [(old, new) for old, news in _reissues(first, second) for new in news]
    same_spot = [(old, new) for old, new in reissues if _metres(old, new) < 0.01]
    moved = [(old, new) for old, new in reissues if 79 < _metres(old, new) < 151]
    assert len(same_spot) > 100 and len(moved) > 50
    assert all(old["names"]["primary"] == new["names"]["primary"] for old, new in same_spot)
    assert all(old["names"]["primary"] != new["names"]["primary"] for old, new in moved)
    # Reissued citing another dataset: gone, no new place cites its record, and a new place near it.
    gone_unlinked = [old for old, news in _reissues(first, second) if not news]
    new_ids = [place for id_, place in second.items() if id_ not in first]
    near = 0.002  # degrees: more than 120 m, a cheap first look before the geodesic
    recited = [
        old
        for old in gone_unlinked
        if any(
            abs(new["bbox"]["ymin"] - old["bbox"]["ymin"]) < near
            and abs(new["bbox"]["xmin"] - old["bbox"]["xmin"]) < 2 * near
            and _metres(old, new) <= 120.5
            for new in new_ids
        )
    ]
    assert len(recited) > 20


def test_a_month_closes_splits_duplicates_and_the_next_merges(months):
    first, second, third = months
    closed = [
        id_
        for id_, place in second.items()
        if place["operating_status"] == "permanently_closed" and first.get(id_, {}).get("operating_status") == "open"
    ]
    assert len(closed) > 20
    splits = [(old, news) for old, news in _reissues(first, second) if len(news) == 2]
    assert len(splits) > 5
    assert all(30 <= max(_metres(old, new) for new in news) <= 81 for old, news in splits)
    merged = [place for id_, place in third.items() if id_ not in second and len(place["sources"]) == 2]
    assert len(merged) > 5
    for place in merged:
        # Both records were cited by places of the month before, now gone: the place and its second listing.
        gone = [old for old in second.values() if _records(old) & _records(place) and old["id"] not in third]
        assert len(gone) == 2 and _metres(*gone) <= 31, gone


def test_like_overture_writes_what_the_api_writes_months_on(tmp_path):
    arguments = ["--rows", "600", "--files", "1", "--row-group-rows", "100", "--seed", "2"]
    result = CliRunner().invoke(
        sample_release,
        [
            str(tmp_path / "cli"),
            "--release",
            "2026-12-17.0",
            "--months",
            "2",
            "--like-overture",
            "--drop",
            "pub",
            *arguments,
        ],
    )
    assert result.exit_code == 0, result.output
    write_sample_release(
        tmp_path / "api",
        "2026-12-17.0",
        600,
        1,
        100,
        seed=2,
        drift=[replace(OVERTURE_MONTH, drop=("pub",))] * 2,
        progress=False,
    )
    cli = ds.dataset(tmp_path / "cli", format="parquet").to_table()
    assert cli.equals(ds.dataset(tmp_path / "api", format="parquet").to_table())


def test_like_overture_sets_its_own_shares(tmp_path):
    result = CliRunner().invoke(sample_release, [str(tmp_path), "--like-overture", "--reissued", "0.1"])
    assert result.exit_code == 2 and "--like-overture sets its own shares" in result.output
    assert not any(tmp_path.iterdir())
