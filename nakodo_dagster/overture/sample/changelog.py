"""A sample release's GERS changelog: what changed by id since the release before, in Overture's layout.

Overture publishes one changelog per release, ``<changelog root>/<release>/theme=places/type=place/
change_type=<kind>/*.parquet`` beside the releases' own root (``s3://overturemaps-us-west-2/changelog`` beside
``.../release``), each row a feature's ``id`` and ``bbox``. The kinds: ``added`` (not in the release before),
``removed`` (in the release before, not in this one; its box is where it was), ``data_changed`` (the same id with
other geometry or properties) and ``unchanged``.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from nakodo_dagster.overture.sample.ids import uuid_strings
from nakodo_dagster.overture.sample.places import Places
from nakodo_dagster.overture.sample.schema import BBOX_TYPE

CHANGE_TYPES = ("added", "removed", "data_changed", "unchanged")
CHANGELOG_SCHEMA = pa.schema([("id", pa.string()), ("bbox", BBOX_TYPE)])
ROW_GROUPS = 16


def changelog_folder(release_changelog: Path, change_type: str) -> Path:
    """Where one kind of a release's changes is, under that release's changelog folder (``<root>/<release>``)."""
    return release_changelog / "theme=places" / "type=place" / f"change_type={change_type}"


def _rows(places: Places, index: np.ndarray) -> pa.Table:
    lng, lat = places.lng[index], places.lat[index]
    bbox = pa.StructArray.from_arrays([lng, lng, lat, lat], fields=list(BBOX_TYPE))
    return pa.Table.from_arrays([uuid_strings(places.id_words[index]), bbox], schema=CHANGELOG_SCHEMA)


def _same(before: np.ndarray, after: np.ndarray) -> np.ndarray:
    """Row by row, whether two columns hold the same value (a missing number is the same as a missing number)."""
    same = before == after
    if before.dtype.kind == "f":
        same |= np.isnan(before) & np.isnan(after)
    return same if same.ndim == 1 else same.all(axis=1)


def changes(before: Places, after: Places) -> dict[str, pa.Table]:
    """Each kind of change from ``before`` to ``after``, matched by id, as the changelog's rows."""
    ids_before, ids_after = uuid_strings(before.id_words), uuid_strings(after.id_words)
    was_at = pc.index_in(ids_after, value_set=ids_before)
    carried = np.flatnonzero(was_at.is_valid().to_numpy(zero_copy_only=False))
    was = pc.drop_null(was_at).to_numpy()
    unchanged = np.ones(len(carried), dtype=bool)
    for field in fields(Places):
        unchanged &= _same(getattr(before, field.name)[was], getattr(after, field.name)[carried])
    removed = np.flatnonzero(~pc.is_in(ids_before, value_set=ids_after).to_numpy(zero_copy_only=False))
    added = np.flatnonzero(~was_at.is_valid().to_numpy(zero_copy_only=False))
    return {
        "added": _rows(after, added),
        "removed": _rows(before, removed),
        "data_changed": _rows(after, carried[~unchanged]),
        "unchanged": _rows(after, carried[unchanged]),
    }


def write_changelog(release_changelog: Path, kinds: dict[str, pa.Table], file_name: str) -> None:
    """Each kind's rows in one file of its folder (a kind with no rows gets no folder, as in Overture's), in
    ``ROW_GROUPS`` row groups: a reader of one box skips the groups whose boxes miss it (the rows come sorted along a
    curve), and the footer every run reads again stays small."""
    for change_type, rows in kinds.items():
        if len(rows):
            folder = changelog_folder(release_changelog, change_type)
            folder.mkdir(parents=True)
            row_group_rows = -(-len(rows) // ROW_GROUPS)
            pq.write_table(rows, folder / file_name, row_group_size=row_group_rows, compression="zstd")
