"""The code location's resources on a real store and the sample release (tests/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.resources import OvertureResource, StoreResource


@pytest.fixture
def resources_off(database_url: str) -> dict:
    """The resources with imports switched off."""
    return {"store": StoreResource(database=database_url), "overture": OvertureResource(root="")}


def release_files(root: str) -> list[Path]:
    return sorted(Path(root, RELEASE, "theme=places", "type=place").glob("*.parquet"))
