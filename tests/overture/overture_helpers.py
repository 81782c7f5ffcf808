"""Plain helpers for the Overture tests: release names, the loopback bucket, runs of known places (the independent
reading of what a run should get is bench.independent, which the fault soak shares)."""

from __future__ import annotations

from pathlib import Path

import boto3

from nakodo_dagster.overture.sample import ReleaseDrift, publish_releases, write_sample_release
from nakodo_dagster.placement import ImportRun, cell, country_area, import_runs

CURRENT = "2026-11-18.0"
PREVIOUS = "2026-10-15.0"
BUCKET = "nakodo-overture"
PREFIX = "release"


def s3_client(endpoint: str):
    """A boto3 S3 client of the loopback server, signed with throwaway keys (the server accepts any)."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-west-2",
        aws_access_key_id="uploader",
        aws_secret_access_key="uploader",
    )


def upload_releases(client, root: Path, bucket: str) -> None:
    """Every release under ``root`` uploaded under s3://bucket/PREFIX, readable by anyone as Overture's bucket is."""
    publish_releases(client, root, bucket, PREFIX)


def block_run(lat0: float, lng0: float, categories=("cafe", "pub", "restaurant")) -> ImportRun:
    """The one run for all 16 cells of the 2 x 2 degree block whose south-west corner is (lat0, lng0)."""
    cells = {c.key: c for c in (cell(lat0 + i / 2, lng0 + j / 2) for i in range(4) for j in range(4))}
    (run,) = import_runs({key: list(categories) for key in cells}, cells)
    return run


def fiji_run(categories=("cafe", "coffee_shop")) -> ImportRun:
    """The run for Fiji as one country, whose box crosses the antimeridian."""
    fiji = country_area("FJ")
    return ImportRun((fiji.key,), tuple(categories), fiji.bbox, "FJ", tuple((fiji.key, c) for c in categories))


# A month as the changelog tests write it: the sample's churn, and some places edited or reissued under new ids.
MONTH = ReleaseDrift(edited=0.02, reissued=0.01)


def write_release_change(bucket: Path, **sample) -> Path:
    """Overture's bucket layout: PREVIOUS and CURRENT (a month on, ``MONTH``) under release/, CURRENT's changelog
    under changelog/; returns the bucket."""
    write_sample_release(bucket / "release", release=PREVIOUS, **sample)
    write_sample_release(
        bucket / "release", release=CURRENT, drift=MONTH, changelog_root=bucket / "changelog", **sample
    )
    return bucket
