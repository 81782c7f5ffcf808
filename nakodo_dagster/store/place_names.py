"""Place names as they were resolved when first looked up (geocode), kept so that a name means one place."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING

from nakodo_dagster.store.models import PlaceName

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

PLACE_NAME_COLUMNS = "query, display_name, lat, lng, looked_up_at"
PLACE_NAME = f"SELECT {PLACE_NAME_COLUMNS} FROM place_names WHERE query = $query"
REMEMBER_PLACE_NAME = (
    f"INSERT INTO place_names ({PLACE_NAME_COLUMNS}) "
    "VALUES ($query, $display_name, $lat, $lng, $looked_up_at) ON CONFLICT (query) DO NOTHING"
)


def place_name(tx: Transaction, query: str) -> PlaceName | None:
    """What the name was resolved to, or None if it never was."""
    rows = tx.rows(PLACE_NAME, query=query)
    return PlaceName(*rows[0]) if rows else None


def remember(tx: Transaction, place: PlaceName) -> PlaceName:
    """Keep what a name was resolved to, unless another caller kept the same name first; returns what is kept."""
    tx.run(REMEMBER_PLACE_NAME, **asdict(place))
    return PlaceName(*tx.rows(PLACE_NAME, query=place.query)[0])
