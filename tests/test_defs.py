"""The code location Dagster loads: every asset, check, job, sensor and resource the README names is there."""

from __future__ import annotations

import dagster as dg
import pytest

from nakodo_dagster.assets.places import NEEDED_PAIRS_FRESH_OR_COMING, PLACES, PLACES_INSIDE_THEIR_AREA
from nakodo_dagster.definitions import defs

SENSORS = ("import_sensor", "search_sensor", "import_failure_sensor", "import_cancel_sensor", "places_coverage_sensor")


@pytest.fixture(scope="module")
def repository() -> dg.RepositoryDefinition:
    return defs.get_repository_def()


@pytest.mark.parametrize(("key", "group"), [("places", "overture"), ("campaign_search", "campaigns")])
def test_each_asset_is_defined_with_its_group_and_kinds(repository, key, group):
    asset = repository.assets_defs_by_key[dg.AssetKey(key)]
    spec = next(iter(asset.specs))
    assert spec.group_name == group
    assert spec.kinds, f"{key} names the systems it lives in"
    assert asset.partitions_def is not None, f"{key} is partitioned"


@pytest.mark.parametrize("check", [PLACES_INSIDE_THEIR_AREA, NEEDED_PAIRS_FRESH_OR_COMING])
def test_each_check_of_places_is_defined(repository, check):
    assert dg.AssetCheckKey(PLACES, check) in repository.asset_graph.asset_check_keys


@pytest.mark.parametrize("job", ["import_places", "search_campaigns_job"])
def test_each_job_is_defined(repository, job):
    assert repository.has_job(job)


@pytest.mark.parametrize("sensor", SENSORS)
def test_each_sensor_is_defined_and_runs_without_being_switched_on(repository, sensor):
    assert repository.get_sensor_def(sensor).default_status == dg.DefaultSensorStatus.RUNNING


def test_the_sensors_are_exactly_those_named(repository):
    assert {s.name for s in repository.sensor_defs} == set(SENSORS)


def test_the_resources_are_read_from_the_environment_when_used_not_when_loaded():
    store = defs.resources["store"]
    overture = defs.resources["overture"]
    assert isinstance(store.database, dg.EnvVar) and store.database.env_var_name == "NAKODO_DATABASE"
    assert isinstance(overture.root, dg.EnvVar) and overture.root.env_var_name == "NAKODO_OVERTURE_ROOT"
