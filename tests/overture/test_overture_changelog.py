"""A next sample release's changelog says, by id, what changed since the release before, laid out as Overture's GERS
changelog and readable as Overture's docs read it; checked against a diff of the two releases made with pyarrow."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest
from click.testing import CliRunner
from overture_helpers import CURRENT, PREVIOUS

from nakodo_dagster.cli.samples import sample_release
from nakodo_dagster.duckdb_connection import in_memory
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.sample import ReleaseDrift, write_sample_release

SAMPLE = {"rows": 5_000, "files": 2, "row_group_rows": 200, "seed": 7, "progress": False}
DRIFT = ReleaseDrift(drop=("bakery",), edited=0.05, reissued=0.02)


def _release(root, release) -> dict[str, dict]:
    table = ds.dataset(root / release / "theme=places" / "type=place", format="parquet").to_table()
    return {row["id"]: row for row in table.to_pylist()}


def _changelog(changelog_root, release) -> dict[str, dict[str, dict]]:
    """The changelog as Overture's docs query it: every type and change type, the partitions as columns."""
    with in_memory() as connection:
        rows = connection.execute(
            "SELECT id, bbox, type, change_type FROM read_parquet($glob, hive_partitioning = true)",
            {"glob": str(changelog_root / release / "theme=places" / "type=*" / "change_type=*" / "*")},
        ).fetchall()
    kinds: dict[str, dict[str, dict]] = {}
    for id_, bbox, type_, change_type in rows:
        assert type_ == "place"
        kinds.setdefault(change_type, {})[id_] = bbox
    return kinds


@pytest.fixture(scope="module")
def releases(tmp_path_factory):
    root, changelog_root = tmp_path_factory.mktemp("release"), tmp_path_factory.mktemp("changelog")
    write_sample_release(root, release=PREVIOUS, **SAMPLE)
    write_sample_release(root, release=CURRENT, drift=DRIFT, changelog_root=changelog_root, **SAMPLE)
    return _release(root, PREVIOUS), _release(root, CURRENT), _changelog(changelog_root, CURRENT)


def test_the_changelog_holds_every_id_once_under_what_happened_to_it(releases):
    before, after, changelog = releases
    added, removed = after.keys() - before.keys(), before.keys() - after.keys()
    kept = after.keys() & before.keys()
    changed = {id_ for id_ in kept if after[id_] != before[id_]}
    assert {kind: set(ids) for kind, ids in changelog.items()} == {
        "added": added,
        "removed": removed,
        "data_changed": changed,
        "unchanged": kept - changed,
    }
    # The drift as asked: bakeries dropped and a month's churn go; 5 % of the places kept are edited.
    assert 0.03 < len(changed) / len(kept) < 0.07
    assert all(after[id_]["version"] == before[id_]["version"] + 1 for id_ in changed)


def test_each_change_is_where_its_place_is_and_a_removed_one_where_it_was(releases):
    before, after, changelog = releases
    for kind, ids in changelog.items():
        where = before if kind == "removed" else after
        assert all(bbox == where[id_]["bbox"] for id_, bbox in ids.items()), kind


def test_a_reissued_place_is_removed_and_added_at_the_same_spot_with_the_same_name(releases):
    before, after, changelog = releases

    def spots(release, ids):
        return {(release[i]["names"]["primary"], release[i]["bbox"]["xmin"], release[i]["bbox"]["ymin"]) for i in ids}

    reissued = spots(before, changelog["removed"]) & spots(after, changelog["added"])
    kept = len(changelog["unchanged"]) + len(changelog["data_changed"])
    assert 0.01 < len(reissued) / kept < 0.03


def test_a_sequence_of_drifts_writes_month_after_month_each_changelog_against_the_month_before(tmp_path):
    root, changelog_root = tmp_path / "release", tmp_path / "changelog"
    month = ReleaseDrift(edited=0.02, reissued=0.05)
    names = ("2026-09-17.0", PREVIOUS, CURRENT)
    write_sample_release(root, release=names[0], **SAMPLE)
    write_sample_release(root, release=names[1], drift=[month], changelog_root=changelog_root, **SAMPLE)
    write_sample_release(root, release=names[2], drift=[month, DRIFT], changelog_root=changelog_root, **SAMPLE)
    # One drift in a sequence writes what it writes alone.
    write_sample_release(tmp_path / "alone", release=names[1], drift=month, **SAMPLE)
    assert _release(tmp_path / "alone", names[1]) == _release(root, names[1])
    first, second, third = (_release(root, name) for name in names)
    for before, after, name in ((first, second, names[1]), (second, third, names[2])):
        kept = after.keys() & before.keys()
        changed = {id_ for id_ in kept if after[id_] != before[id_]}
        assert {kind: set(ids) for kind, ids in _changelog(changelog_root, name).items()} == {
            "added": after.keys() - before.keys(),
            "removed": before.keys() - after.keys(),
            "data_changed": changed,
            "unchanged": kept - changed,
        }
    # The third month is a month of its own: places the second kept are edited, reissued and dropped again.
    assert len(third.keys() & first.keys()) < len(third.keys() & second.keys()) < len(second)
    bakeries = [row for row in third.values() if row["taxonomy"]["primary"] == "bakery"]
    assert 0 < len(bakeries) < 0.2 * sum(row["taxonomy"]["primary"] == "bakery" for row in second.values())


def test_a_box_query_on_the_changelog_finds_the_changes_inside_the_box(tmp_path):
    """Overture's docs query the changelog by box and change type: the sample answers as the releases' diff does."""
    changelog_root = tmp_path / "changelog"
    write_sample_release(tmp_path / "release", release=PREVIOUS, **SAMPLE)
    write_sample_release(tmp_path / "release", release=CURRENT, drift=DRIFT, changelog_root=changelog_root, **SAMPLE)
    before, after = _release(tmp_path / "release", PREVIOUS), _release(tmp_path / "release", CURRENT)
    box = {"xmin": 2.0, "xmax": 2.7, "ymin": 48.6, "ymax": 49.1}

    def inside(row: dict) -> bool:
        at = row["bbox"]
        return (
            box["xmin"] < at["xmin"]
            and at["xmax"] < box["xmax"]
            and box["ymin"] < at["ymin"]
            and at["ymax"] < box["ymax"]
        )

    expected = {
        "added": sum(inside(after[i]) for i in after.keys() - before.keys()),
        "removed": sum(inside(before[i]) for i in before.keys() - after.keys()),
    }
    assert all(expected.values())
    with in_memory() as connection:
        counted = connection.execute(
            "SELECT change_type, count(*) FROM read_parquet($glob, hive_partitioning = true) "
            "WHERE bbox.xmin > $xmin AND bbox.xmax < $xmax AND bbox.ymin > $ymin AND bbox.ymax < $ymax "
            "AND change_type IN ('added', 'removed') GROUP BY change_type",
            {"glob": str(changelog_root / CURRENT / "theme=places" / "type=*" / "change_type=*" / "*"), **box},
        ).fetchall()
    assert dict(counted) == expected


def test_a_changelog_needs_a_next_release_and_is_never_overwritten(tmp_path):
    release, changelog = tmp_path / "release", tmp_path / "changelog"
    with pytest.raises(InvalidInput, match="write it with a next release's drift"):
        write_sample_release(release, release=CURRENT, changelog_root=changelog, **SAMPLE)
    assert not release.exists() and not changelog.exists()
    (changelog / CURRENT).mkdir(parents=True)
    with pytest.raises(InvalidInput, match="already exists"):
        write_sample_release(release, release=CURRENT, drift=DRIFT, changelog_root=changelog, **SAMPLE)
    assert not release.exists()


def test_sample_release_writes_a_next_release_and_its_changelog(tmp_path):
    arguments = [str(tmp_path / "release"), "--rows", "300", "--files", "2", "--seed", "3"]
    assert CliRunner().invoke(sample_release, [*arguments, "--release", PREVIOUS]).exit_code == 0
    changelog = tmp_path / "changelog"
    result = CliRunner().invoke(
        sample_release, [*arguments, "--release", CURRENT, "--next", "--edited", "0.1", "--changelog", str(changelog)]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (changelog / CURRENT / "theme=places" / "type=place").iterdir()) == [
        "change_type=added",
        "change_type=data_changed",
        "change_type=removed",
        "change_type=unchanged",
    ]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--changelog", "changes"], "write it with a next release's drift"),
        (["--edited", "1.5"], "edited 1.5 is not allowed: use a share from 0 to under 1"),
        (["--edited", "0.6", "--reissued", "0.5"], "edited and reissued together must be under 1"),
    ],
)
def test_a_changelog_or_drift_that_cannot_be_right_exits_2_saying_why(tmp_path, arguments, message):
    result = CliRunner().invoke(sample_release, [str(tmp_path / "release"), "--rows", "300", *arguments])
    assert result.exit_code == 2
    assert message in result.stderr
    assert not (tmp_path / "release").exists()
