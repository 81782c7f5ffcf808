"""An import run's changes, as the release's changelog lists them in its cells, against pyarrow's reading of the
changelog's files; locally and from the loopback bucket."""

from __future__ import annotations

import math

import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest
from overture_helpers import CURRENT, PREVIOUS, block_run, s3_client, write_release_change

from nakodo_dagster.overture.changelog import changelog_beside, read_run_changes
from nakodo_dagster.overture.sample import publish_releases
from nakodo_dagster.placement import cell, country_area, import_runs

SAMPLE = {"rows": 8_000, "files": 2, "row_group_rows": 200, "seed": 9, "progress": False}


@pytest.fixture(scope="module")
def overture(tmp_path_factory):
    """Overture's bucket layout: releases under release/, their changelogs beside, under changelog/."""
    return write_release_change(tmp_path_factory.mktemp("bucket"), **SAMPLE)


def _changes(bucket, run, release):
    return read_run_changes(run, str(bucket / "changelog"), release, PREVIOUS)


def _expected(bucket, areas: list[str]) -> tuple[dict[str, int], dict[str, tuple[str, ...]]]:
    """Per cell, places added or changed and ids removed, by pyarrow and the cells' arithmetic written out here."""
    table = ds.dataset(
        bucket / "changelog" / CURRENT, format="parquet", partitioning="hive", exclude_invalid_files=True
    ).to_table()
    moved, removed = dict.fromkeys(areas, 0), {area: [] for area in areas}
    lat = pc.struct_field(table["bbox"], "ymin").to_pylist()
    lng = pc.struct_field(table["bbox"], "xmin").to_pylist()
    for id_, kind, y, x in zip(table["id"].to_pylist(), table["change_type"].to_pylist(), lat, lng, strict=True):
        south, west = math.floor(y * 2) / 2, math.floor(x * 2) / 2
        key = f"cell:{south:g},{west:g}"
        if key in moved and kind in ("added", "data_changed"):
            moved[key] += 1
        elif key in removed and kind == "removed":
            removed[key].append(id_)
    return moved, {area: tuple(sorted(ids)) for area, ids in removed.items()}


def test_a_runs_changes_are_the_changelogs_in_its_cells(overture):
    # Paris's block: busy cells, and a quiet one at its edge.
    areas = [cell(48.5, 2.0), cell(48.5, 2.5), cell(49.0, 2.0), cell(49.5, 3.5)]
    (run,) = import_runs({a.key: ["cafe"] for a in areas}, {a.key: a for a in areas})
    changes = _changes(overture, run, CURRENT)
    moved, removed = _expected(overture, list(run.areas))
    assert changes.moved == moved
    assert changes.removed == removed
    assert moved[cell(48.5, 2.0).key] > 0 and removed[cell(48.5, 2.0).key]
    assert any(changes.moved.values()) or any(changes.removed.values())
    assert changes.bytes_read > 0
    assert changes.base == PREVIOUS


def test_a_run_where_nothing_changed_is_untouched(overture):
    # The open sea off West Africa: no place, so no change.
    (run,) = import_runs({cell(0.0, -20.0).key: ["cafe"]}, {})
    changes = _changes(overture, run, CURRENT)
    assert not any(changes.moved.values()) and not any(changes.removed.values())
    assert changes.moved == {cell(0.0, -20.0).key: 0}


def test_nothing_to_go_by_without_a_changelog_or_for_a_country(overture, tmp_path):
    (block,) = import_runs({cell(48.5, 2.0).key: ["cafe"]}, {})
    assert _changes(overture, block, PREVIOUS) is None
    assert read_run_changes(block, str(tmp_path / "nowhere"), CURRENT, PREVIOUS) is None
    (country,) = import_runs({"country:FR": ["cafe"]}, {"country:FR": country_area("FR")})
    assert _changes(overture, country, CURRENT) is None


def test_the_changelog_is_beside_the_releases():
    assert changelog_beside("s3://overturemaps-us-west-2/release") == "s3://overturemaps-us-west-2/changelog"
    assert changelog_beside("s3://overturemaps-us-west-2/release/") == "s3://overturemaps-us-west-2/changelog"
    assert changelog_beside("/data/overture") == "/data/changelog"


def test_the_changelog_reads_the_same_from_the_bucket(overture, s3_server, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    remote_root = publish_releases(s3_client(s3_server), overture / "changelog", "nakodo-changelog", "changelog")
    run = block_run(48.0, 2.0)
    remote = read_run_changes(run, remote_root, CURRENT, PREVIOUS)
    local = _changes(overture, run, CURRENT)
    assert (remote.moved, remote.removed) == (local.moved, local.removed)
    assert any(remote.moved.values())
    assert read_run_changes(run, remote_root, PREVIOUS, "2026-09-16.0") is None
