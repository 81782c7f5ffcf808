"""Sample releases on disk and on a loopback S3 server, and an independent reading of what a run should get."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from overture_helpers import BUCKET, CURRENT, PREFIX, PREVIOUS, s3_client, upload_releases

from bench.independent import ReadRow, expected_read
from nakodo_dagster.overture.sample import write_sample_release
from nakodo_dagster.placement import ImportRun


@pytest.fixture(scope="session")
def sample_root(tmp_path_factory) -> Path:
    """Two small releases, one per schema, in many small row groups across several files."""
    root = tmp_path_factory.mktemp("overture")
    for release, schema in ((CURRENT, "current"), (PREVIOUS, "previous")):
        write_sample_release(
            root, release=release, rows=4_000, files=4, row_group_rows=40, schema=schema, seed=11, progress=False
        )
    return root


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory) -> Path:
    """A folder of release indexes the reading tests share, as every run of a deployment shares one."""
    return tmp_path_factory.mktemp("overture_index")


@pytest.fixture(scope="session")
def s3_bucket(s3_server: str, sample_root: Path) -> str:
    """The sample releases uploaded under s3://BUCKET/PREFIX, readable by anyone, as Overture's bucket is."""
    upload_releases(s3_client(s3_server), sample_root, BUCKET)
    return f"s3://{BUCKET}/{PREFIX}"


@pytest.fixture
def s3_root(s3_bucket: str, s3_server: str, monkeypatch) -> str:
    """The S3 root, with the endpoint in AWS_ENDPOINT_URL and no credentials: anonymous, as in production."""
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_server)
    return s3_bucket


@pytest.fixture
def expected(sample_root: Path) -> Callable[[str, ImportRun], list[ReadRow]]:
    """expected(release, run): the rows an independent reading of the sample release gives for the run."""
    return lambda release, run: expected_read(sample_root, release, run)
