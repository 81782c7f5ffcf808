"""What a release's GERS changelog says changed in an import run's cells, read without reading the release.

Overture publishes, beside each release, the changes since the release before it, by id:
``<changelog root>/<release>/theme=places/type=place/change_type=<added|removed|data_changed|unchanged>/*.parquet``,
each row a feature's ``id`` and ``bbox`` (a removed feature's where it was). The changelog root is the releases'
sibling: ``s3://overturemaps-us-west-2/changelog`` beside ``.../release``. It names no category, so an added or
changed place counts whatever its category, and a removed one is told by its id.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from pathlib import Path

from nakodo_dagster.duckdb_connection import interruptible
from nakodo_dagster.overture.duck import connect, is_s3
from nakodo_dagster.overture.reader import box_predicate
from nakodo_dagster.overture.releases import check_release_name, glob_files
from nakodo_dagster.placement import ImportRun, cell_containing

CHANGELOG_FILES = "theme=places/type=place/change_type=*/*.parquet"
# The change types that move a place; the "unchanged" files, most of a changelog, are never opened.
CHANGED = ("added", "removed", "data_changed")


def changelog_beside(root: str) -> str:
    """Where Overture keeps the changelogs of the releases under ``root``: its sibling folder ``changelog``."""
    return posixpath.join(posixpath.dirname(root.rstrip("/")), "changelog")


@dataclass(frozen=True)
class RunChanges:
    """The changes a release's changelog lists in each of a run's cells since the release before it."""

    release: str
    base: str
    """The release the changelog compares with: the one just before ``release``."""
    moved: dict[str, int]
    """Per cell of the run, the places added or changed (any category: the changelog names none)."""
    removed: dict[str, tuple[str, ...]]
    """Per cell of the run, the ids of the places removed."""
    bytes_read: int


def read_run_changes(run: ImportRun, changelog_root: str, release: str, base: str) -> RunChanges | None:
    """The changes in the run's cells that the changelog of ``release`` lists since ``base`` (the release listed
    just before it), or None when there is nothing to go by: the release has no changelog under ``changelog_root``,
    or the run is a country's (a country's places are told by their address, not their box)."""
    if run.country_code:
        return None
    if not is_s3(changelog_root) and not Path(changelog_root).is_dir():
        return None
    meets_box, parameters = box_predicate(run.bbox)
    with connect(changelog_root) as connection:
        listed = glob_files(connection, f"{changelog_root}/{check_release_name(release)}/{CHANGELOG_FILES}")
        if not listed:
            return None
        files = [file for file in listed if any(f"/change_type={kind}/" in file for kind in CHANGED)]
        if not files:
            return RunChanges(release, base, dict.fromkeys(run.areas, 0), {area: () for area in run.areas}, 0)
        connection.execute("SET enable_profiling = 'no_output'")
        connection.execute("""SET custom_profiling_settings = '{"TOTAL_BYTES_READ": "true"}'""")
        query = f"""
            SELECT change_type, id, (bbox.ymin + bbox.ymax) / 2 AS lat, (bbox.xmin + bbox.xmax) / 2 AS lng
            FROM read_parquet($files, hive_partitioning = true)
            WHERE {meets_box}
            """
        rows = interruptible(connection, lambda: connection.execute(query, parameters | {"files": files}).fetchall())
        bytes_read = json.loads(connection.get_profiling_information(format="json")).get("total_bytes_read") or 0
    cells = set(run.areas)
    moved = dict.fromkeys(run.areas, 0)
    removed: dict[str, list[str]] = {area: [] for area in run.areas}
    for change_type, id_, lat, lng in rows:
        area = cell_containing(lat, lng).key
        if area not in cells:
            continue
        if change_type == "removed":
            removed[area].append(id_)
        else:
            moved[area] += 1
    return RunChanges(release, base, moved, {area: tuple(sorted(ids)) for area, ids in removed.items()}, bytes_read)
