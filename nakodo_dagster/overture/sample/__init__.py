"""Sample Overture places releases, made here so that tests, benchmarks and the default run need no internet.

A release is written in Overture's layout, ``<root>/<release>/theme=places/type=place/part-*.zstd.parquet``,
with Overture's places columns and GeoParquet 1.1 metadata. Two schema flavours:

- ``current`` (the 2026-09 releases on): ``basic_category`` and ``taxonomy`` (primary, hierarchy,
  alternates) and ``operating_status``; no ``categories``.
- ``previous`` (the releases before 2025-09): ``categories`` (primary, alternate) and no
  ``operating_status``, no ``basic_category``, no ``taxonomy``.

The flavour does not depend on the release name: any name can carry either, so both can be tested side by side.
``bbox`` is a struct of doubles (Overture ships floats; doubles keep a point's box exactly on the point).

Places cluster around ``CITIES`` and carry categories from ``TAXONOMY``, a subset of Overture's taxonomy
(docs.overturemaps.org, 2026-03 categories and hierarchies). Rows are sorted along a Hilbert curve and the
files split that order, as Overture's files are spatially sorted, so row-group statistics on ``bbox`` prune.
``FIXED_PLACES`` are always in the release: the edge cases every reader has to get right.
These tables, and the words and streets that made-up places are named and addressed with, ship as package data
in ``nakodo_dagster/data/sample_release.toml`` and are read once at import (``tables``); the code that makes rows
from them is in ``places``, the columns' types in ``schema``, the ids in ``ids``, a next release's changes in
``drift`` and the release's files in ``writer``. What the rest of the project uses is importable from here.
"""

from nakodo_dagster.overture.sample.drift import OVERTURE_MONTH, ReleaseDrift
from nakodo_dagster.overture.sample.ids import random_uuid_words, uuid_strings
from nakodo_dagster.overture.sample.schema import SCHEMAS, places_schema
from nakodo_dagster.overture.sample.tables import CITIES, FIXED_PLACES, TAXONOMY, border_country
from nakodo_dagster.overture.sample.writer import (
    DEFAULT_FILES,
    DEFAULT_RELEASE,
    DEFAULT_ROWS,
    publish_releases,
    write_sample_release,
)

__all__ = [
    "CITIES",
    "DEFAULT_FILES",
    "DEFAULT_RELEASE",
    "DEFAULT_ROWS",
    "FIXED_PLACES",
    "OVERTURE_MONTH",
    "SCHEMAS",
    "TAXONOMY",
    "ReleaseDrift",
    "border_country",
    "places_schema",
    "publish_releases",
    "random_uuid_words",
    "uuid_strings",
    "write_sample_release",
]
