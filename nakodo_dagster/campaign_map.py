"""A picture of a campaign for the Dagster UI: where it looks, which cells have landed, what it found, on the
countries' outlines (nakodo_dagster/data/country_outlines.json, Natural Earth 1:110m)."""

from __future__ import annotations

import base64
import io
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

import numpy as np
from geographiclib.geodesic import Geodesic

from nakodo_dagster.countries import BBox
from nakodo_dagster.placement import Area, PointLocation, Targeting
from nakodo_dagster.words import plural

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.path import Path
    from matplotlib.transforms import Bbox

STATE_COLOURS = {"loaded": "#2e9e4f", "coming": "#f0a830", "failed": "#d64545", "missing": "#9aa0a6"}
SEA_COLOUR = "#dbe9f4"
LAND_COLOUR = "#f3f0e8"
BORDER_COLOUR = "#8c8c8c"
# A business gone from Overture's newest release: a cross, apart from the failed cells' red.
REMOVED_COLOUR = "#7b1fa2"
CLOSED_COLOUR = "#e06c00"
LABEL_COLOUR = "#555555"
# A 480 x 480 PNG: big enough to read in the UI's metadata panel, small enough to keep in every map's event.
FIGURE_INCHES, FIGURE_DPI = 6, 80
# Where a country's name may go: the points of a LABEL_GRID x LABEL_GRID grid over the view inside the country,
# nearest its visible middle first, at most LABEL_TRIES of them (enough to find room beside a city's businesses,
# which crowd the middle of the view).
LABEL_GRID, LABEL_TRIES = 9, 30
# Pixels kept clear around each label.
LABEL_MARGIN = 2


@dataclass(frozen=True)
class CountryOutline:
    """One country of the packaged outlines: its rings as one matplotlib path (outer rings clockwise, holes
    counter-clockwise, so a fill leaves the holes open) and the box around them."""

    code: str | None
    name: str
    path: Path
    bbox: BBox


@cache
def country_outlines() -> tuple[CountryOutline, ...]:
    """Every country's outline from the file packaged with the project; read once per process."""
    from matplotlib.path import Path

    text = files("nakodo_dagster").joinpath("data/country_outlines.json").read_text(encoding="utf-8")
    outlines = []
    for country in json.loads(text)["countries"]:
        rings = [np.array(ring, dtype=float).reshape(-1, 2) for polygon in country["polygons"] for ring in polygon]
        vertices = np.concatenate(rings)
        codes = np.concatenate(
            [[Path.MOVETO, *[Path.LINETO] * (len(ring) - 2), Path.CLOSEPOLY] for ring in rings]
        ).astype(Path.code_type)
        (west, south), (east, north) = vertices.min(axis=0), vertices.max(axis=0)
        outlines.append(
            CountryOutline(country["code"], country["name"], Path(vertices, codes), (west, south, east, north))
        )
    return tuple(outlines)


def countries_in_view(view: BBox) -> list[tuple[CountryOutline, float]]:
    """The countries whose outline's box reaches into the view, each with the whole turns (-360, 0 or 360) that
    shift it into the view's unwrapped longitudes; a country seen on both sides of the view comes twice."""
    view_west, view_south, view_east, view_north = view
    return [
        (outline, turn)
        for outline in country_outlines()
        for turn in (-360.0, 0.0, 360.0)
        if outline.bbox[0] + turn < view_east
        and outline.bbox[2] + turn > view_west
        and outline.bbox[1] < view_north
        and outline.bbox[3] > view_south
    ]


def _unwrap(lng: float, centre: float) -> float:
    # Keep a campaign across the antimeridian in one piece: longitudes near the centre's side of 180.
    while lng - centre > 180:
        lng -= 360
    while lng - centre < -180:
        lng += 360
    return lng


def _centre(targeting: Targeting, areas: Mapping[str, Area]) -> float:
    for location in targeting.locations:
        if isinstance(location, PointLocation):
            return location.lng
    west, _, east, _ = next(iter(areas.values())).bbox
    return (west + (east if east >= west else east + 360)) / 2


def _shifted(path: Path, turn: float) -> Path:
    from matplotlib.path import Path

    return path if turn == 0 else Path(path.vertices + np.array([turn, 0.0]), path.codes)


def _draw_countries(axes: Axes) -> list[tuple[str, Path]]:
    """Fill the land of the countries in view, their borders and coasts drawn, under everything else and without
    moving the view; returns each country's name and its path as drawn."""
    from matplotlib.patches import PathPatch

    axes.apply_aspect()
    (view_west, view_east), (view_south, view_north) = axes.get_xlim(), axes.get_ylim()
    axes.set_autoscale_on(False)
    drawn = []
    for outline, turn in countries_in_view((view_west, view_south, view_east, view_north)):
        path = _shifted(outline.path, turn)
        axes.add_patch(PathPatch(path, facecolor=LAND_COLOUR, edgecolor=BORDER_COLOUR, linewidth=0.6, zorder=0))
        drawn.append((outline.name, path))
    return drawn


def _label_spots(axes: Axes, drawn: list[tuple[str, Path]]) -> list[tuple[str, list[tuple[float, float]]]]:
    """Where each country's name may go, largest country in view first: grid points inside it, nearest the middle
    of its visible part first."""
    (west, east), (south, north) = axes.get_xlim(), axes.get_ylim()
    xs = np.linspace(west, east, LABEL_GRID + 2)[1:-1]
    ys = np.linspace(south, north, LABEL_GRID + 2)[1:-1]
    grid = np.array([(x, y) for y in ys for x in xs])
    spots = []
    for name, path in drawn:
        inside = grid[path.contains_points(grid)]
        if len(inside):
            middle = inside.mean(axis=0)
            nearest = inside[np.argsort(((inside - middle) ** 2).sum(axis=1))]
            spots.append((name, [(float(x), float(y)) for x, y in nearest[:LABEL_TRIES]]))
    return sorted(spots, key=lambda spot: -len(spot[1]))


def _label_countries(
    axes: Axes, drawn: list[tuple[str, Path]], taken: list[Bbox], points: list[tuple[float, float]]
) -> None:
    """Name the countries in view where a name fits: inside the axes, clear of every name already placed, of
    ``taken`` (the legend) and of every business in ``points`` (x, y in data units): the names are background, the
    businesses are what the map is for. A country with no such place goes unnamed rather than written over."""
    renderer = axes.figure.canvas.get_renderer()
    frame = axes.get_window_extent(renderer)
    placed = list(taken)
    shown = axes.transData.transform(np.array(points, dtype=float).reshape(-1, 2))
    for name, spots in _label_spots(axes, drawn):
        for x, y in spots:
            label = axes.text(
                x,
                y,
                name,
                color=LABEL_COLOUR,
                fontsize=8,
                ha="center",
                va="center",
                clip_on=True,
                zorder=3,
                # Over the cells and their edges, on a scrap of land colour that keeps the name readable.
                bbox={"facecolor": LAND_COLOUR, "alpha": 0.7, "edgecolor": "none", "pad": 1},
            )
            box = label.get_window_extent(renderer).padded(LABEL_MARGIN)
            fits = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            covers = (
                (shown[:, 0] >= box.x0) & (shown[:, 0] <= box.x1) & (shown[:, 1] >= box.y0) & (shown[:, 1] <= box.y1)
            )
            if fits and not covers.any() and not any(box.overlaps(other) for other in placed):
                placed.append(box)
                break
            label.remove()


def campaign_map(
    title: str,
    targeting: Targeting,
    areas: Mapping[str, Area],
    area_states: Mapping[str, str],
    businesses: Iterable[tuple[float, float]],
    removed: Iterable[tuple[float, float]] = (),
    closed: Iterable[tuple[float, float]] = (),
) -> Figure:
    """The map as a matplotlib figure: circles or country areas, cells coloured by import state, businesses as
    dots (those ``removed`` from Overture's newest release as purple crosses, those it marks permanently ``closed``
    as orange rings), on the land and sea of the countries in view, each country named where its name fits."""
    # Imported here, not at the top: every run loads the code location, and matplotlib alone costs about half
    # a second that only a search's map needs.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    centre = _centre(targeting, areas)
    figure = Figure(figsize=(FIGURE_INCHES, FIGURE_INCHES), dpi=FIGURE_DPI)
    FigureCanvasAgg(figure)
    figure.subplots_adjust(left=0.13, right=0.97, bottom=0.1, top=0.93)
    axes = figure.add_subplot()
    axes.set_facecolor(SEA_COLOUR)
    for key, area in areas.items():
        west, south, east, north = area.bbox
        width = (east - west) % 360 or 360
        state = area_states.get(key, "missing")
        axes.add_patch(
            Rectangle(
                (_unwrap(west, centre), south),
                width,
                north - south,
                facecolor=STATE_COLOURS[state],
                alpha=0.25,
                edgecolor=STATE_COLOURS[state],
            )
        )
    for location in targeting.locations:
        if isinstance(location, PointLocation):
            ring = [
                Geodesic.WGS84.Direct(location.lat, location.lng, bearing, location.radius_km * 1000)
                for bearing in range(0, 361, 5)
            ]
            axes.plot([_unwrap(p["lon2"], centre) for p in ring], [p["lat2"] for p in ring], color="#1f4e8c")
    points, gone, shut = list(businesses), list(removed), list(closed)
    shown = [(_unwrap(lng, centre), lat) for lat, lng in points]
    shown_gone = [(_unwrap(lng, centre), lat) for lat, lng in gone]
    shown_shut = [(_unwrap(lng, centre), lat) for lat, lng in shut]
    if points:
        axes.scatter([x for x, _ in shown], [y for _, y in shown], s=4, color="#111111")
    if gone:
        axes.scatter([x for x, _ in shown_gone], [y for _, y in shown_gone], s=14, marker="x", color=REMOVED_COLOUR)
    if shut:
        axes.scatter(
            [x for x, _ in shown_shut],
            [y for _, y in shown_shut],
            s=16,
            marker="o",
            facecolors="none",
            edgecolors=CLOSED_COLOUR,
        )
    axes.autoscale_view()
    # Degrees of longitude shrink towards the poles: at the view's middle latitude a kilometre is as long east
    # as north.
    (_, south), (_, north) = axes.dataLim.get_points()
    middle = min(abs(south + north) / 2, 80.0)
    axes.set_aspect(1 / math.cos(math.radians(middle)), adjustable="datalim")
    drawn = _draw_countries(axes)
    counted = plural(len(points) + len(gone) + len(shut), "business", "businesses")
    marked = [f"{len(gone):,} removed"] * bool(gone) + [f"{len(shut):,} closed"] * bool(shut)
    axes.set_title(", ".join([f"{title}: {counted}", *marked]))
    axes.set_xlabel("longitude")
    axes.set_ylabel("latitude")
    border = Line2D([], [], color=BORDER_COLOUR, linewidth=0.6, label="border or coast")
    states = [Patch(color=c, alpha=0.5, label=s) for s, c in STATE_COLOURS.items()]
    gone_mark = Line2D([], [], marker="x", linestyle="", color=REMOVED_COLOUR, label="removed from Overture")
    shut_mark = Line2D(
        [], [], marker="o", linestyle="", markerfacecolor="none", color=CLOSED_COLOUR, label="closed for good"
    )
    marks = [*([gone_mark] if gone else []), *([shut_mark] if shut else [])]
    legend = axes.legend(handles=[*states, border, *marks], loc="lower right", fontsize=8)
    _label_countries(
        axes, drawn, [legend.get_window_extent(figure.canvas.get_renderer())], shown + shown_gone + shown_shut
    )
    return figure


def figure_png(figure: Figure) -> bytes:
    """The figure as a PNG; a ``campaign_map`` is FIGURE_INCHES x FIGURE_DPI pixels a side."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


MARKDOWN_IMAGE = "![campaign map](data:image/png;base64,"


def markdown_image(png: bytes) -> str:
    """The PNG inlined as Markdown, which the Dagster UI renders in the metadata panel."""
    return f"{MARKDOWN_IMAGE}{base64.b64encode(png).decode()})"
