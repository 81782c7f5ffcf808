"""The Arrow schema of a places file in either flavour, ``current`` or ``previous``."""

from __future__ import annotations

import pyarrow as pa

from nakodo_dagster.errors import InvalidInput

SCHEMAS = ("current", "previous")
NAMES_TYPE = pa.struct(
    [
        ("primary", pa.string()),
        ("common", pa.map_(pa.string(), pa.string())),
        (
            "rules",
            pa.list_(
                pa.struct(
                    [
                        ("variant", pa.string()),
                        ("language", pa.string()),
                        ("value", pa.string()),
                        ("between", pa.list_(pa.float64())),
                        ("side", pa.string()),
                    ]
                )
            ),
        ),
    ]
)
SOURCE_TYPE = pa.struct(
    [
        ("property", pa.string()),
        ("dataset", pa.string()),
        ("license", pa.string()),
        ("record_id", pa.string()),
        ("update_time", pa.string()),
        ("confidence", pa.float64()),
        ("between", pa.list_(pa.float64())),
    ]
)
ADDRESS_TYPE = pa.struct(
    [
        ("freeform", pa.string()),
        ("locality", pa.string()),
        ("postcode", pa.string()),
        ("region", pa.string()),
        ("country", pa.string()),
    ]
)
BBOX_TYPE = pa.struct([("xmin", pa.float64()), ("xmax", pa.float64()), ("ymin", pa.float64()), ("ymax", pa.float64())])
TAXONOMY_TYPE = pa.struct(
    [("primary", pa.string()), ("hierarchy", pa.list_(pa.string())), ("alternates", pa.list_(pa.string()))]
)
CATEGORIES_TYPE = pa.struct([("primary", pa.string()), ("alternate", pa.list_(pa.string()))])
STRINGS = pa.list_(pa.string())


def places_schema(schema: str = "current") -> pa.Schema:
    """The Arrow schema of a places file in the given flavour, ``current`` or ``previous``."""
    check_schema(schema)
    fields = [
        ("id", pa.string()),
        ("geometry", pa.binary()),
        ("bbox", BBOX_TYPE),
        ("version", pa.int32()),
        ("sources", pa.list_(SOURCE_TYPE)),
        ("names", NAMES_TYPE),
    ]
    if schema == "current":
        fields += [("basic_category", pa.string()), ("taxonomy", TAXONOMY_TYPE)]
    else:
        fields += [("categories", CATEGORIES_TYPE)]
    fields += [
        ("confidence", pa.float64()),
        ("websites", STRINGS),
        ("socials", STRINGS),
        ("emails", STRINGS),
        ("phones", STRINGS),
        ("brand", pa.struct([("wikidata", pa.string()), ("names", NAMES_TYPE)])),
        ("addresses", pa.list_(ADDRESS_TYPE)),
    ]
    if schema == "current":
        fields.append(("operating_status", pa.string()))
    return pa.schema(fields)


def check_schema(schema: str) -> None:
    if schema not in SCHEMAS:
        raise InvalidInput(f"schema {schema!r} is not allowed: use 'current' (taxonomy) or 'previous' (categories)")
