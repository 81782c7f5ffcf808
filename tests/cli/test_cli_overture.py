"""``nakodo overture check``: the command a failed import's advice names, run as a user runs it, over a real release
copied and broken, judged against pyarrow's own reading of each file."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow.parquet as pq
from overture_helpers import CURRENT as RELEASE


def _copied_release(release_root: str, tmp_path: Path) -> tuple[Path, list[Path]]:
    root = tmp_path / "overture"
    shutil.copytree(Path(release_root) / RELEASE, root / RELEASE)
    return root, sorted((root / RELEASE).rglob("*.parquet"))


def _pyarrow_reads(path: Path) -> bool:
    try:
        pq.ParquetFile(path)
    except Exception:
        return False
    return True


def test_a_whole_release_reads(nakodo, release_root, tmp_path):
    root, files = _copied_release(release_root, tmp_path)

    checked = nakodo("overture", "check", NAKODO_OVERTURE_ROOT=str(root))

    assert checked.stdout.strip().splitlines()[-1] == f"Release {RELEASE}: all {len(files)} files under {root} read."
    assert all(_pyarrow_reads(path) for path in files)


def test_files_cut_short_or_not_parquet_are_named_and_the_command_exits_1(nakodo, release_root, tmp_path):
    root, files = _copied_release(release_root, tmp_path)
    cut, garbled = files[1], files[-1]
    cut.write_bytes(cut.read_bytes()[: cut.stat().st_size // 2])
    garbled.write_bytes(b"PAR1 this is not a parquet file")

    checked = nakodo("overture", "check", RELEASE, NAKODO_OVERTURE_ROOT=str(root), expect=1)

    named = [line.removeprefix("unreadable: ") for line in checked.stdout.splitlines() if line.startswith("unread")]
    assert {path for path in files if any(str(path) in line for line in named)} == {cut, garbled}
    assert {path for path in files if not _pyarrow_reads(path)} == {cut, garbled}, "pyarrow agrees"
    assert f"2 files of {len(files)} of release {RELEASE} cannot be read" in checked.stderr


def test_no_root_or_an_unknown_release_is_refused(nakodo, release_root, tmp_path):
    off = nakodo("overture", "check", NAKODO_OVERTURE_ROOT="", expect=2)
    assert "NAKODO_OVERTURE_ROOT isn't set" in off.stderr

    unknown = nakodo("overture", "check", "2020-01-01.0", NAKODO_OVERTURE_ROOT=release_root, expect=2)
    assert f"available here: {RELEASE}" in unknown.stderr
