"""A campaign's map: a real PNG, real land and sea from the packaged Natural Earth outlines, names that never
overlap."""

from __future__ import annotations

import io
import itertools
import json
from importlib.resources import files

import numpy as np
import pytest
from matplotlib.image import imread
from matplotlib.patches import PathPatch
from matplotlib.path import Path

from nakodo_dagster.campaign_map import (
    FIGURE_DPI,
    FIGURE_INCHES,
    LAND_COLOUR,
    SEA_COLOUR,
    campaign_map,
    countries_in_view,
    figure_png,
)
from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting, areas_for

SIDE = FIGURE_INCHES * FIGURE_DPI
# A 200 km circle on the French Atlantic coast: the Bay of Biscay to the west, the Loire valley to the east.
BISCAY = Targeting((PointLocation(46.5, -1.5, 200),), ("cafe",))
LOIRE_VALLEY, BAY_OF_BISCAY = (0.5, 47.0), (-3.0, 46.0)
# Seven countries side by side, whose names would collide wherever each was written at its middle.
CENTRAL_EUROPE = Targeting(
    tuple(CountryLocation(code) for code in ("DE", "PL", "CZ", "AT", "HU", "SK", "SI")), ("cafe",)
)


def packaged_countries() -> list[dict]:
    """The outlines file as shipped, read without the code under test."""
    text = files("nakodo_dagster").joinpath("data/country_outlines.json").read_text(encoding="utf-8")
    return json.loads(text)["countries"]


def rgb(colour: str) -> tuple[int, int, int]:
    return tuple(int(colour[i : i + 2], 16) for i in (1, 3, 5))


def pixel(png: bytes, axes, lng: float, lat: float) -> tuple[int, int, int]:
    """The PNG's colour where the map's axes put (lng, lat)."""
    image = imread(io.BytesIO(png))
    x, y = axes.transData.transform((lng, lat))
    return tuple(round(float(v) * 255) for v in image[SIDE - 1 - int(y), int(x), :3])


def test_the_map_is_a_png_of_fixed_size():
    areas = areas_for(BISCAY)

    png = figure_png(campaign_map("Biscay", BISCAY, areas, dict.fromkeys(areas, "loaded"), [(46.5, -1.5)]))

    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert imread(io.BytesIO(png)).shape == (SIDE, SIDE, 4)


def test_land_and_sea_are_where_the_packaged_outlines_put_the_coast():
    [france] = [c for c in packaged_countries() if c["code"] == "FR"]
    outline = Path(np.concatenate([np.reshape(ring, (-1, 2)) for polygon in france["polygons"] for ring in polygon]))
    assert outline.contains_point(LOIRE_VALLEY) and not outline.contains_point(BAY_OF_BISCAY)

    # No cells: only land and sea where no circle or dot is drawn.
    figure = campaign_map("Biscay", BISCAY, {}, {}, [])
    png = figure_png(figure)
    [axes] = figure.axes

    assert pixel(png, axes, *LOIRE_VALLEY) == rgb(LAND_COLOUR)
    assert pixel(png, axes, *BAY_OF_BISCAY) == rgb(SEA_COLOUR)


@pytest.mark.parametrize(
    ("targeting", "among"),
    [(BISCAY, {"France"}), (CENTRAL_EUROPE, {"Germany", "Poland", "Czechia", "Austria", "Italy", "Denmark"})],
    ids=["Biscay", "central Europe"],
)
def test_every_country_of_the_file_in_view_is_drawn_with_its_outline(targeting, among):
    areas = areas_for(targeting)
    figure = campaign_map("Outlines", targeting, areas, dict.fromkeys(areas, "loaded"), [])
    [axes] = figure.axes
    (west, east), (south, north) = axes.get_xlim(), axes.get_ylim()
    in_view = {}
    for country in packaged_countries():
        points = np.concatenate([np.reshape(ring, (-1, 2)) for polygon in country["polygons"] for ring in polygon])
        (c_west, c_south), (c_east, c_north) = points.min(axis=0), points.max(axis=0)
        if c_west < east and c_east > west and c_south < north and c_north > south:
            in_view[country["name"]] = len(points)

    # The cells are rectangles; the countries are the only paths.
    drawn = [patch for patch in axes.patches if isinstance(patch, PathPatch)]

    assert among <= set(in_view)
    assert sorted(len(patch.get_path().vertices) for patch in drawn) == sorted(in_view.values())


def test_a_country_across_the_antimeridian_is_shifted_into_an_unwrapped_view():
    # Fiji has islands on both sides of 180: the western ones come a turn east to sit beside the others.
    assert {(outline.code, turn) for outline, turn in countries_in_view((179.5, -17.5, 180.5, -16.5))} == {
        ("FJ", 0.0),
        ("FJ", 360.0),
    }


@pytest.mark.parametrize(
    ("targeting", "at_least"), [(CENTRAL_EUROPE, 8), (BISCAY, 1)], ids=["central Europe", "Biscay"]
)
def test_country_names_never_overlap_each_other_or_the_legend(targeting, at_least):
    areas = areas_for(targeting)
    figure = campaign_map("Names", targeting, areas, dict.fromkeys(areas, "coming"), [])
    figure_png(figure)
    [axes] = figure.axes
    renderer = figure.canvas.get_renderer()
    frame = axes.get_window_extent(renderer)
    names = {text.get_text(): text.get_window_extent(renderer) for text in axes.texts}
    legend = axes.get_legend().get_window_extent(renderer)

    assert len(names) >= at_least, f"names placed: {sorted(names)}"
    assert set(names) <= {country["name"] for country in packaged_countries()}
    for (name, box), (other, other_box) in itertools.combinations(names.items(), 2):
        assert not box.overlaps(other_box), f"{name} overlaps {other}"
    for name, box in names.items():
        assert not box.overlaps(legend), f"{name} overlaps the legend"
        assert frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1, name


def test_country_names_leave_every_business_visible():
    # Paris within 25 km, businesses over the whole circle and beyond: France's middle is under them.
    paris = Targeting((PointLocation(48.85, 2.35, 25),), ("bakery",))
    areas = areas_for(paris)
    rng = np.random.default_rng(5)
    businesses = [(48.85 + dlat, 2.35 + dlng) for dlat, dlng in rng.uniform(-0.3, 0.3, size=(400, 2))]
    figure = campaign_map("Paris", paris, areas, dict.fromkeys(areas, "loaded"), businesses)
    figure_png(figure)
    [axes] = figure.axes
    renderer = figure.canvas.get_renderer()
    shown = axes.transData.transform([(lng, lat) for lat, lng in businesses])

    names = {text.get_text(): text.get_window_extent(renderer) for text in axes.texts}
    assert "France" in names, sorted(names)
    for name, box in names.items():
        covered = [(x, y) for x, y in shown if box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1]
        assert covered == [], f"{name} is written over {len(covered)} businesses"
