"""The command line writes nothing into the folder it is started from: the release index goes to the configured
folder, or by default beside a DuckDB store or into the user's cache."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from shlex import split

from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.overture.index import index_path

NAKODO = str(Path(sys.executable).with_name("nakodo"))


def _sync_from_an_empty_folder(environment: dict[str, str], tmp_path: Path, **variables: str) -> Path:
    """Add a campaign and sync it from a fresh, empty working folder; the folder, for the caller to look into."""
    work = tmp_path / "work"
    home = tmp_path / "dagster_home"
    work.mkdir()
    home.mkdir()
    env = {**environment, "DAGSTER_HOME": str(home), **variables}
    for command in ("campaign add --name Leeds --at 53.75,-1.75 --radius-km 2 --category cafe", "sync --wait 60"):
        done = subprocess.run([NAKODO, *split(command)], cwd=work, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"nakodo {command}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    assert "1 import run (0 failed)" in done.stdout
    return work


def test_sync_keeps_the_index_in_the_configured_folder(environment, tmp_path, release_root):
    configured = tmp_path / "indexes"

    work = _sync_from_an_empty_folder(
        environment, tmp_path, NAKODO_OVERTURE_ROOT=str(release_root), NAKODO_OVERTURE_INDEX=str(configured)
    )

    assert list(work.iterdir()) == []
    assert index_path(release_root, RELEASE, configured).is_file()


def test_sync_keeps_the_index_beside_a_duckdb_store_or_in_the_cache_by_default(
    environment, tmp_path, release_root, database_url
):
    cache = tmp_path / "cache"

    work = _sync_from_an_empty_folder(
        environment,
        tmp_path,
        NAKODO_OVERTURE_ROOT=str(release_root),
        NAKODO_OVERTURE_INDEX="",
        XDG_CACHE_HOME=str(cache),
    )

    assert list(work.iterdir()) == []
    if database_url.startswith("postgresql://"):
        default = cache / "nakodo_dagster" / "overture_index"
    else:
        default = Path(database_url).parent / "overture_index"
    assert index_path(release_root, RELEASE, default).is_file()
