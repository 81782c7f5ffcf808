"""The code location Dagster loads: every asset, check, job, sensor and resource the README names is there."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from nakodo_dagster.assets.coverage import NEEDED_PAIRS_FRESH_OR_COMING
from nakodo_dagster.definitions import defs
from nakodo_dagster.imports.events import PLACES, PLACES_INSIDE_THEIR_AREA

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


_SHOW_RESOURCES = """
from nakodo_dagster.definitions import defs
store, overture = defs.resources["store"], defs.resources["overture"]
for value in (store.database, overture.root, overture.release, overture.index, overture.queue_minutes):
    name = getattr(value, "env_var_name", None)  # dg.EnvVar, or dg.EnvVar.int's
    print(f"EnvVar {name}" if name else repr(value))
"""


def _loaded_resources(folder: Path, environ: dict[str, str]) -> list[str]:
    plain = {name: value for name, value in os.environ.items() if not name.startswith("NAKODO_")}
    shown = subprocess.run(
        [sys.executable, "-c", _SHOW_RESOURCES], cwd=folder, env={**plain, **environ}, capture_output=True, text=True
    )
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.splitlines()


def test_a_set_variable_is_read_when_used_not_when_loaded(tmp_path):
    names = (
        "NAKODO_DATABASE",
        "NAKODO_OVERTURE_ROOT",
        "NAKODO_OVERTURE_RELEASE",
        "NAKODO_OVERTURE_INDEX",
        "NAKODO_IMPORT_QUEUE_MINUTES",
    )
    environ = {name: "15" for name in names}

    assert _loaded_resources(tmp_path, environ) == [f"EnvVar {name}" for name in names]


def test_every_setting_has_a_default_on_the_embedded_data_of_the_working_folder(tmp_path):
    assert _loaded_resources(tmp_path, {}) == [repr(str(tmp_path / "data" / "nakodo.duckdb")), "''", "''", "''", "10"]
    # Once `make run` or `nakodo demo` has written the sample release, imports read it.
    (tmp_path / "data" / "overture").mkdir(parents=True)
    assert _loaded_resources(tmp_path, {})[1] == repr(str(tmp_path / "data" / "overture"))
