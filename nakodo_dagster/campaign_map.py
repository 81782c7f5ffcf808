"""A picture of a campaign for the Dagster UI: where it looks, which cells have landed, what it found."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from geographiclib.geodesic import Geodesic

from nakodo_dagster.countries import BBox, country_bbox, country_codes
from nakodo_dagster.placement import Area, PointLocation, Targeting

if TYPE_CHECKING:
    from matplotlib.axes import Axes

STATE_COLOURS = {"loaded": "#2e9e4f", "coming": "#f0a830", "failed": "#d64545", "missing": "#9aa0a6"}
COUNTRY_COLOUR = "#6b6b6b"


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


def country_boxes(view: BBox) -> list[tuple[str, BBox]]:
    """The countries whose box (nakodo_dagster/data/countries.csv, the only geography the project ships) reaches
    into the view, shifted by whole turns to sit in the view's unwrapped longitudes; a box across the antimeridian
    stays one box (east beyond 180)."""
    view_west, view_south, view_east, view_north = view
    found = []
    for code in country_codes():
        west, south, east, north = country_bbox(code)
        east = east if east >= west else east + 360.0
        for turn in (-360.0, 0.0, 360.0):
            if west + turn < view_east and east + turn > view_west and south < view_north and north > view_south:
                found.append((code, (west + turn, south, east + turn, north)))
    return found


def _draw_countries(axes: Axes) -> None:
    """Outline the country boxes in view, each labelled with its code inside its visible corner, without moving
    the view: they say where the campaign is, not what it is."""
    from matplotlib.patches import Rectangle

    axes.apply_aspect()
    (view_west, view_east), (view_south, view_north) = axes.get_xlim(), axes.get_ylim()
    axes.set_autoscale_on(False)
    pad = (view_east - view_west) * 0.01
    for code, (west, south, east, north) in country_boxes((view_west, view_south, view_east, view_north)):
        axes.add_patch(
            Rectangle(
                (west, south),
                east - west,
                north - south,
                fill=False,
                edgecolor=COUNTRY_COLOUR,
                linestyle="--",
                linewidth=0.8,
            )
        )
        axes.text(
            max(west, view_west) + pad,
            min(north, view_north) - pad,
            code,
            color=COUNTRY_COLOUR,
            fontsize=8,
            verticalalignment="top",
            clip_on=True,
        )


def campaign_map_png(
    title: str,
    targeting: Targeting,
    areas: Mapping[str, Area],
    area_states: Mapping[str, str],
    businesses: Iterable[tuple[float, float]],
) -> bytes:
    """A PNG: circles or country boxes, cells coloured by import state, businesses as dots, and the boxes of the
    countries in view for context."""
    # Imported here, not at the top: every run loads the code location, and matplotlib alone costs about half
    # a second that only a search's map needs.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    centre = _centre(targeting, areas)
    figure, axes = plt.subplots(figsize=(6, 6), dpi=80)
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
    points = list(businesses)
    if points:
        axes.scatter([_unwrap(lng, centre) for _, lng in points], [lat for lat, _ in points], s=4, color="#111111")
    axes.set_aspect("equal", adjustable="datalim")
    axes.autoscale_view()
    _draw_countries(axes)
    axes.set_title(f"{title}: {len(points)} businesses")
    axes.set_xlabel("longitude")
    axes.set_ylabel("latitude")
    countries = Line2D([], [], color=COUNTRY_COLOUR, linestyle="--", linewidth=0.8, label="country box")
    states = [Patch(color=c, alpha=0.5, label=s) for s, c in STATE_COLOURS.items()]
    axes.legend(handles=[*states, countries], loc="lower right")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def markdown_image(png: bytes) -> str:
    """The PNG inlined as Markdown, which the Dagster UI renders in the metadata panel."""
    return f"![campaign map](data:image/png;base64,{base64.b64encode(png).decode()})"
