"""A picture of a campaign for the Dagster UI: where it looks, which cells have landed, what it found."""

from __future__ import annotations

import base64
import io
from collections.abc import Iterable, Mapping

from geographiclib.geodesic import Geodesic

from nakodo_dagster.placement import Area, PointLocation, Targeting

STATE_COLOURS = {"loaded": "#2e9e4f", "coming": "#f0a830", "failed": "#d64545", "missing": "#9aa0a6"}


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


def campaign_map_png(
    title: str,
    targeting: Targeting,
    areas: Mapping[str, Area],
    area_states: Mapping[str, str],
    businesses: Iterable[tuple[float, float]],
) -> bytes:
    """A PNG: circles or country boxes, cells coloured by import state, businesses as dots."""
    # Imported here, not at the top: every run loads the code location, and matplotlib alone costs about half
    # a second that only a search's map needs.
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
    axes.set_title(f"{title}: {len(points)} businesses")
    axes.set_xlabel("longitude")
    axes.set_ylabel("latitude")
    axes.legend(handles=[Patch(color=c, alpha=0.5, label=s) for s, c in STATE_COLOURS.items()], loc="lower right")
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    plt.close(figure)
    return buffer.getvalue()


def markdown_image(png: bytes) -> str:
    """The PNG inlined as Markdown, which the Dagster UI renders in the metadata panel."""
    return f"![campaign map](data:image/png;base64,{base64.b64encode(png).decode()})"
