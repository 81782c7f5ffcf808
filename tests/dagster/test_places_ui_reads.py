"""The UI reads well: the places page names what feeds it, loading the code location prints no warning about
anything this project set, and a campaign's map places it among the countries it is in."""

from __future__ import annotations

import subprocess
import sys

import pytest

from nakodo_dagster.assets.coverage import needed_pairs_fresh_or_coming, places_coverage_sensor
from nakodo_dagster.assets.places import NEEDED_PAIRS_FRESH_OR_COMING, PLACES
from nakodo_dagster.campaign_map import campaign_map_png, country_boxes
from nakodo_dagster.definitions import defs
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.placement import PointLocation, Targeting, areas_for
from nakodo_dagster.sensors.failure_sensor import import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor


def test_the_places_page_names_the_sensors_the_job_and_the_check_behind_it():
    description = defs.resolve_assets_def(PLACES).specs_by_key[PLACES].description
    for name in (import_sensor.name, import_places.name, import_failure_sensor.name, NEEDED_PAIRS_FRESH_OR_COMING):
        assert name in description
    # Each name is a real definition of the code location, not a stale word.
    assert defs.resolve_sensor_def(import_sensor.name) and defs.resolve_sensor_def(import_failure_sensor.name)
    assert defs.resolve_job_def(import_places.name)
    assert needed_pairs_fresh_or_coming.check_key.name == NEEDED_PAIRS_FRESH_OR_COMING
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


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        # Around Leeds: Great Britain only.
        ((-2.0, 53.5, -1.0, 54.5), {"GB"}),
        # Across the antimeridian in unwrapped longitudes: Fiji's box is one box, east of 180.
        ((179.5, -17.5, 180.5, -16.5), {"FJ"}),
    ],
)
def test_a_map_shows_the_country_boxes_in_its_view(view, expected):
    boxes = country_boxes(view)
    assert {code for code, _ in boxes} == expected
    for _, (west, _, east, _) in boxes:
        assert west < east and west < view[2] and east > view[0]


def test_a_campaign_map_still_draws_with_the_countries_added():
    leeds = Targeting((PointLocation(53.7997, -1.5492, 25),), ("cafe",))
    areas = areas_for(leeds)

    png = campaign_map_png("Leeds", leeds, areas, dict.fromkeys(areas, "loaded"), [(53.8, -1.55)])

    assert png.startswith(b"\x89PNG")
