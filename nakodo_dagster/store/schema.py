"""The store's tables, as numbered migrations that DuckDB and PostgreSQL both accept word for word.

Append a new version to change the schema; never edit one that has shipped, because a database records
only the number it reached.

``places.address`` is text as the reader gives it (one formatted line); when the reader hands a struct or a
list instead, the store keeps its JSON. ``websites`` and ``phones`` are JSON arrays of strings, as text.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            # release is an Overture release name or 'requested': see placement.REQUESTED.
            """
            CREATE TABLE place_imports (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                release TEXT NOT NULL,
                rows INTEGER NOT NULL DEFAULT 0,
                imported_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (area, category)
            )
            """,
            """
            CREATE TABLE places (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                id TEXT NOT NULL,
                name TEXT,
                lat DOUBLE PRECISION NOT NULL,
                lng DOUBLE PRECISION NOT NULL,
                confidence DOUBLE PRECISION,
                address TEXT,
                country TEXT,
                websites TEXT,
                phones TEXT,
                release TEXT NOT NULL,
                PRIMARY KEY (area, category, id)
            )
            """,
            # A sequence rather than SERIAL: DuckDB has no SERIAL, and both accept this.
            "CREATE SEQUENCE campaigns_id_seq",
            """
            CREATE TABLE campaigns (
                id INTEGER PRIMARY KEY DEFAULT nextval('campaigns_id_seq'),
                name TEXT NOT NULL,
                targeting TEXT NOT NULL,
                status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused')),
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            # A snapshot, not a view over places: a campaign's results survive the next import of its areas.
            """
            CREATE TABLE campaign_businesses (
                campaign_id INTEGER NOT NULL REFERENCES campaigns (id),
                place_id TEXT NOT NULL,
                name TEXT,
                category TEXT NOT NULL,
                lat DOUBLE PRECISION NOT NULL,
                lng DOUBLE PRECISION NOT NULL,
                distance_km DOUBLE PRECISION,
                address TEXT,
                websites TEXT,
                phones TEXT,
                country TEXT,
                added_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (campaign_id, place_id)
            )
            """,
        ),
    ),
    (
        2,
        (
            # Place names a user typed, as Nominatim resolved them: OpenStreetMap asks that a name be looked
            # up once, and a campaign added twice near "Leeds" must land on the same centre. query is the name
            # with its spaces collapsed and its case folded; only names that resolved to one place are kept.
            """
            CREATE TABLE place_names (
                query TEXT PRIMARY KEY,
                display_name TEXT NOT NULL,
                lat DOUBLE PRECISION NOT NULL,
                lng DOUBLE PRECISION NOT NULL,
                looked_up_at TIMESTAMPTZ NOT NULL
            )
            """,
        ),
    ),
)
