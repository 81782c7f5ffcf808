"""Release discovery in a local folder: the newest, a named one, a missing one, bad names, an empty root."""

from __future__ import annotations

import pytest

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.releases import (
    check_release_name,
    check_root,
    list_releases,
    newest_release,
    places_glob,
    release_before,
    resolve_release,
)
from nakodo_dagster.overture.sample import FIXED_PLACES, write_sample_release

RELEASES = ("2026-09-17.0", "2026-10-15.9", "2026-10-15.10", "2026-11-18.0")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    """Several tiny releases, and folders that are not releases."""
    root = tmp_path_factory.mktemp("releases")
    for release in RELEASES:
        write_sample_release(root, release=release, rows=len(FIXED_PLACES), files=1, progress=False)
    (root / "2026-12-16.0" / "theme=buildings" / "type=building").mkdir(parents=True)
    (root / "latest" / "theme=places" / "type=place").mkdir(parents=True)
    (root / "latest" / "theme=places" / "type=place" / "part-0.parquet").write_bytes(b"")
    (root / ".2026-12-16.0.abc123" / "theme=places" / "type=place").mkdir(parents=True)
    return root


def test_releases_are_listed_oldest_first_numbering_as_numbers(root):
    assert list_releases(root) == list(RELEASES)


def test_the_release_before_one_is_the_one_listed_just_before_it(root):
    assert release_before(root, "2026-11-18.0") == "2026-10-15.10"
    assert release_before(root, "2026-10-15.10") == "2026-10-15.9"
    assert release_before(root, "2026-12-16.0") == "2026-11-18.0"
    assert release_before(root, "2026-09-17.0") is None


def test_the_newest_release_is_the_default(root):
    assert newest_release(root) == "2026-11-18.0"
    assert resolve_release(str(root)) == "2026-11-18.0"


def test_a_named_release_is_used_when_the_root_holds_it(root):
    assert resolve_release(root, "2026-10-15.10") == "2026-10-15.10"


def test_a_missing_release_says_only_the_last_two_stay_online_and_lists_what_is_there(root):
    with pytest.raises(InvalidInput) as error:
        resolve_release(root, "2026-08-20.0")
    message = str(error.value)
    assert "'2026-08-20.0' is not under" in message
    assert "only the last two releases online" in message
    assert ", ".join(RELEASES) in message


@pytest.mark.parametrize(
    "name", ["../2026-11-18.0", "2026-11-18.0/../x", "2026-11-18", "latest", "", "2026-13-01.0", "2026-11-18.0 ", "*"]
)
def test_a_bad_release_name_is_invalid_input(root, name):
    with pytest.raises(InvalidInput, match=r"YYYY-MM-DD\.N"):
        resolve_release(root, name)
    with pytest.raises(InvalidInput):
        check_release_name(name)


def test_an_empty_root_holds_no_release(tmp_path):
    with pytest.raises(InvalidInput, match="holds no release"):
        newest_release(tmp_path)
    with pytest.raises(InvalidInput, match="available here: none"):
        resolve_release(tmp_path, "2026-11-18.0")


@pytest.mark.parametrize("root", ["gs://bucket/release", "s3://", "s3://Bad_Bucket/x", "s3://bucket//x", "http://x/y"])
def test_a_root_that_is_neither_a_folder_nor_an_s3_prefix_is_invalid(root):
    with pytest.raises(InvalidInput, match="s3://bucket/prefix"):
        check_root(root)


def test_a_folder_root_must_exist_and_hold_no_glob_characters(tmp_path):
    with pytest.raises(InvalidInput, match="not a folder"):
        newest_release(tmp_path / "missing")
    with pytest.raises(InvalidInput, match=r"\*"):
        check_root(tmp_path / "rel*")


def test_roots_are_normalised(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert check_root("data/") == str(tmp_path / "data")
    assert check_root("s3://overturemaps-us-west-2/release/") == "s3://overturemaps-us-west-2/release"
    assert places_glob("s3://overturemaps-us-west-2/release", "2026-11-18.0") == (
        "s3://overturemaps-us-west-2/release/2026-11-18.0/theme=places/type=place/*.parquet"
    )
