"""A sample release written in Overture's layout, its files spatially sorted with GeoParquet metadata; releases uploaded
to an S3 bucket as Overture publishes them."""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from tqdm import tqdm

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.releases import check_release_name
from nakodo_dagster.overture.sample.changelog import changes, write_changelog
from nakodo_dagster.overture.sample.drift import ReleaseDrift
from nakodo_dagster.overture.sample.ids import random_uuid_words, uuid_of
from nakodo_dagster.overture.sample.places import Places
from nakodo_dagster.overture.sample.schema import check_schema, places_schema
from nakodo_dagster.overture.sample.tables import FIXED_PLACES

DEFAULT_RELEASE = "2026-11-18.0"
DEFAULT_ROWS = 100_000
# Overture's places release: 16 files of about 256 row groups each.
DEFAULT_FILES = 16
ROW_GROUPS_PER_FILE = 256


def write_sample_release(
    root: str | Path,
    release: str = DEFAULT_RELEASE,
    rows: int = DEFAULT_ROWS,
    files: int = DEFAULT_FILES,
    row_group_rows: int | None = None,
    schema: str = "current",
    seed: int = 0,
    progress: bool = True,
    drift: ReleaseDrift | Sequence[ReleaseDrift] | None = None,
    changelog_root: str | Path | None = None,
) -> Path:
    """Write a sample places release under ``root`` in Overture's layout and return the release's folder.

    ``row_group_rows`` defaults to what gives each file about 256 row groups, as in Overture's releases.
    The same arguments always write the same rows. With ``drift``, the release is the next one after what the
    same arguments write without it: the same places by id, changed as ``drift`` says (the fixed places stay);
    with ``changelog_root`` as well, its changelog against that release is written there, in Overture's layout.
    A sequence of drifts writes the release as many months on, each month drifted from the one before as its drift
    says: the release before it is what the same arguments write with all but the last drift, and the changelog is
    against that one. So ``[a]``, ``[a, b]``, ``[a, b, c]`` write three releases one after the other, month by month
    (``[a]`` writes what ``a`` alone does).
    """
    check_release_name(release)
    check_schema(schema)
    for name, value, low in (("rows", rows, len(FIXED_PLACES)), ("files", files, 1), ("seed", seed, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidInput(f"{name} {value!r} is not allowed: use a whole number of at least {low}")
    if files > rows:
        raise InvalidInput(f"files {files} is more than rows {rows}: every file needs at least one place")
    if row_group_rows is None:
        row_group_rows = max(1, math.ceil(rows / files / ROW_GROUPS_PER_FILE))
    if isinstance(row_group_rows, bool) or not isinstance(row_group_rows, int) or row_group_rows < 1:
        raise InvalidInput(f"row_group_rows {row_group_rows!r} is not allowed: use a whole number of at least 1")
    months = _months(drift)
    if changelog_root is not None and not months:
        raise InvalidInput(
            "a changelog says what changed since the release before: write it with a next release's drift"
        )
    root = Path(root)
    targets = [root / release] + ([] if changelog_root is None else [Path(changelog_root) / release])
    for target in targets:
        if target.exists():
            raise InvalidInput(f"{target} already exists: choose another release name or remove that folder")

    places = Places.generate(rows, np.random.default_rng(seed))
    file_ids = random_uuid_words(np.random.default_rng([seed, 1]), files)
    before = places
    for month, month_drift in enumerate(months):
        # The first month's generator is the one a single drift has always used: its releases stay the same.
        rng = np.random.default_rng([seed, 2, month] if month else [seed, 2])
        before, places = places, places.drifted(month_drift, rng)
    if changelog_root is not None:
        # Sorted along the same curve as the release's files: a run's box meets few of the changelog's groups.
        kinds = {kind: _spatially_sorted(rows) for kind, rows in changes(before, places).items()}
        file_name = f"part-00000-{uuid_of(*file_ids[0])}-c000.zstd.parquet"
        _write_aside(Path(changelog_root), release, lambda folder: write_changelog(folder, kinds, file_name))
    order = np.argsort(_hilbert(places.lng, places.lat), kind="stable")
    arrow_schema = places_schema(schema)

    def write_files(folder: Path) -> None:
        folder = folder / "theme=places" / "type=place"
        folder.mkdir(parents=True)
        with tqdm(total=len(order), unit="places", desc=f"sample {release}", disable=None if progress else True) as bar:
            for number, chunk in enumerate(np.array_split(order, files)):
                table = places.table(chunk, schema, arrow_schema)
                name = f"part-{number:05d}-{uuid_of(*file_ids[number])}-c000.zstd.parquet"
                pq.write_table(
                    table.replace_schema_metadata({b"geo": _geo_metadata(table)}),
                    folder / name,
                    row_group_size=row_group_rows,
                    compression="zstd",
                )
                bar.update(len(chunk))

    return _write_aside(root, release, write_files)


def _months(drift: ReleaseDrift | Sequence[ReleaseDrift] | None) -> tuple[ReleaseDrift, ...]:
    """``drift`` as the months it drifts, one ``ReleaseDrift`` each (none: the base release)."""
    if drift is None:
        return ()
    months = tuple(drift) if isinstance(drift, Sequence) else (drift,)
    if not all(isinstance(month, ReleaseDrift) for month in months):
        raise InvalidInput(f"drift {drift!r} is not allowed: use a ReleaseDrift, or a sequence of them (one a month)")
    return months


def _write_aside(root: Path, release: str, write: Callable[[Path], None]) -> Path:
    """``root/release`` written by ``write`` into a folder aside and renamed into place: a crash never leaves a half
    release (or changelog) that discovery would pick up."""
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{release}.", dir=root))
    try:
        write(staging)
        staging.rename(root / release)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return root / release


def _spatially_sorted(rows: pa.Table) -> pa.Table:
    bbox = rows["bbox"]
    lng = pc.struct_field(bbox, "xmin").to_numpy(zero_copy_only=False)
    lat = pc.struct_field(bbox, "ymin").to_numpy(zero_copy_only=False)
    return rows.take(np.argsort(_hilbert(lng, lat), kind="stable"))


def _hilbert(lng: np.ndarray, lat: np.ndarray, order: int = 16) -> np.ndarray:
    """Each point's distance along a Hilbert curve over the globe, so that near points sort near each other."""
    side = 1 << order
    x = np.minimum(((lng + 180.0) / 360.0 * side).astype(np.int64), side - 1)
    y = np.minimum(((lat + 90.0) / 180.0 * side).astype(np.int64), side - 1)
    distance = np.zeros(len(x), dtype=np.int64)
    s = side >> 1
    while s > 0:
        rx = (x & s) > 0
        ry = (y & s) > 0
        distance += s * s * ((3 * rx) ^ ry)
        flip = ~ry & rx
        x = np.where(flip, side - 1 - x, x)
        y = np.where(flip, side - 1 - y, y)
        x, y = np.where(~ry, y, x), np.where(~ry, x, y)
        s >>= 1
    return distance


def _geo_metadata(table: pa.Table) -> bytes:
    """GeoParquet 1.1 metadata naming the bbox column as the geometry's covering, with the file's extent."""
    bbox = table.column("bbox")
    extent = [
        pc.min(pc.struct_field(bbox, "xmin")).as_py(),
        pc.min(pc.struct_field(bbox, "ymin")).as_py(),
        pc.max(pc.struct_field(bbox, "xmax")).as_py(),
        pc.max(pc.struct_field(bbox, "ymax")).as_py(),
    ]
    geometry = {
        "encoding": "WKB",
        "geometry_types": ["Point"],
        "bbox": extent,
        "covering": {"bbox": {key: ["bbox", key] for key in ("xmin", "ymin", "xmax", "ymax")}},
    }
    return json.dumps({"version": "1.1.0", "primary_column": "geometry", "columns": {"geometry": geometry}}).encode()


def publish_releases(client: Any, root: str | Path, bucket: str, prefix: str) -> str:
    """Every release under ``root`` uploaded to s3://bucket/prefix with a boto3 client, readable by anyone as
    Overture's bucket is; returns the s3:// root to read them from."""
    client.create_bucket(Bucket=bucket, CreateBucketConfiguration={"LocationConstraint": "us-west-2"})
    public_read = {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": "*",
                "Action": ["s3:GetObject", "s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}", f"arn:aws:s3:::{bucket}/*"],
            }
        ],
    }
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(public_read))
    for path in sorted(Path(root).rglob("*.parquet")):
        client.upload_file(str(path), bucket, f"{prefix}/{path.relative_to(root).as_posix()}")
    return f"s3://{bucket}/{prefix}"
