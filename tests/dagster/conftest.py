"""A real Dagster instance, a real store and a sample release for the code location's tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.overture.sample import write_sample_release
from nakodo_dagster.resources import OvertureResource, StoreResource


@pytest.fixture(scope="session")
def release_root(tmp_path_factory) -> str:
    """A small sample release in Overture's layout, shared by the tests that only read it."""
    root = tmp_path_factory.mktemp("overture")
    write_sample_release(root, release=RELEASE, rows=20_000, files=4, row_group_rows=500, seed=7, progress=False)
    return str(root)


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    """A local Dagster instance in a temporary DAGSTER_HOME, with the project's pool limit."""
    with dg.instance_for_test(overrides={"concurrency": {"pools": {"default_limit": 2}}}) as instance:
        yield instance


@pytest.fixture
def resources(database_url: str, release_root: str) -> dict:
    """The code location's resources on a fresh store (both backends) and the sample release."""
    return {"store": StoreResource(database=database_url), "overture": OvertureResource(root=release_root)}


@pytest.fixture
def resources_off(database_url: str) -> dict:
    """The resources with imports switched off."""
    return {"store": StoreResource(database=database_url), "overture": OvertureResource(root="")}


def release_files(root: str) -> list[Path]:
    return sorted(Path(root, RELEASE, "theme=places", "type=place").glob("*.parquet"))
