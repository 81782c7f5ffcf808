"""The UI reads well: the places page names what feeds it, and loading the code location prints no warning about
anything this project set (a campaign's map: tests/test_campaign_map.py)."""

from __future__ import annotations

import subprocess
import sys

from nakodo_dagster.assets.coverage import NEEDED_PAIRS_FRESH_OR_COMING, places_coverage_sensor
from nakodo_dagster.assets.places import NEEDED_PAIRS_CHECK
from nakodo_dagster.definitions import defs
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.sensors.failure_sensor import import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor


def test_the_places_page_names_the_sensors_the_job_and_the_check_behind_it():
    description = defs.resolve_assets_def(PLACES).specs_by_key[PLACES].description
    for name in (import_sensor.name, import_places.name, import_failure_sensor.name, NEEDED_PAIRS_FRESH_OR_COMING):
        assert name in description
    # Each name is a real definition of the code location, not a stale word.
    assert defs.resolve_sensor_def(import_sensor.name) and defs.resolve_sensor_def(import_failure_sensor.name)
    assert defs.resolve_job_def(import_places.name)
    assert NEEDED_PAIRS_CHECK in defs.resolve_assets_def(PLACES).check_keys
    assert defs.resolve_sensor_def(places_coverage_sensor.name)
    # One click from the places page to the check listing the pairs that need attention, a second to a pair.
    check_page = f"(/assets/places?view=checks&checkDetail={NEEDED_PAIRS_FRESH_OR_COMING})"
    assert f"[{NEEDED_PAIRS_FRESH_OR_COMING}]{check_page}" in description


def test_the_places_page_says_first_where_the_needed_pairs_stand():
    description = defs.resolve_assets_def(PLACES).specs_by_key[PLACES].description
    # The second sentence names the check; the third says the partitions tab's counts are not what campaigns lack.
    _what, second, third = description.split(". ")[:3]
    assert NEEDED_PAIRS_FRESH_OR_COMING in second
    assert "partitions tab" in third and "not what campaigns lack" in third


def test_loading_the_code_location_warns_about_nothing(duckdb_url, tmp_path):
    # A fresh process, as dagster dev's code server: every warning is an error.
    loaded = subprocess.run(
        [
            sys.executable,
            "-W",
            "error",
            "-c",
            "from nakodo_dagster.definitions import defs; defs.get_repository_def().get_all_jobs()",
        ],
        env={"NAKODO_DATABASE": duckdb_url, "NAKODO_OVERTURE_ROOT": "", "DAGSTER_HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert loaded.returncode == 0, loaded.stderr
