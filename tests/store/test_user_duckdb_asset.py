"""The asset example of docs/configuration.md on the DuckDB store, materialised as the page shows it, counts what
the store wrote."""

from __future__ import annotations

import re
import runpy
from pathlib import Path

import dagster as dg
import pyarrow as pa
from store_helpers import NOW, RELEASE, places_table, run_for

from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.store import open_store

GUIDE = Path(__file__).parents[2] / "docs" / "configuration.md"
CELL, EAST, GB = "cell:53.5,-2", "cell:53.5,-1.5", "country:GB"


def _guide_example(folder: Path) -> dict:
    """The globals of the page's example, run from a module of its own as a user's code location would be."""
    [code] = re.findall(r"<!-- user-duckdb-asset[^>]*-->\n```python\n(.*?)\n```", GUIDE.read_text(), re.DOTALL)
    module = folder / "user_assets.py"
    module.write_text(code)
    return runpy.run_path(str(module))


def _place(id_: str, area: str, category: str) -> dict:
    return {"id": id_, "area": area, "category": category, "lat": 53.8, "lng": -1.6}


def test_the_readme_asset_counts_the_places_per_category_the_store_wrote(duckdb_url, monkeypatch, tmp_path):
    store = open_store(duckdb_url)
    store.migrate()
    cells = [
        *(_place(id_, CELL, "cafe") for id_ in ("c1", "c2")),
        _place("e1", EAST, "cafe"),
        _place("p1", CELL, "pub"),
        *(_place(id_, EAST, "pub") for id_ in ("p2", "p3")),
        # A place that is both a cafe and a pub: a row for each category.
        _place("cp", CELL, "cafe"),
        _place("cp", CELL, "pub"),
    ]
    # The country holds two of the cells' cafes again, and a bakery of its own.
    country = [_place("c1", GB, "cafe"), _place("e1", GB, "cafe"), _place("b1", GB, "bakery")]
    imports = [
        ([(CELL, "cafe"), (CELL, "pub"), (EAST, "cafe"), (EAST, "pub")], places_table(cells)),
        ([(GB, "cafe"), (GB, "bakery")], places_table(country)),
    ]
    for pairs, places in imports:
        store.write_import(run_for(pairs), RELEASE, places, NOW)

    monkeypatch.setenv("NAKODO_DATABASE", duckdb_url)
    example = _guide_example(tmp_path)
    result = dg.materialize([example["places_per_category"]], resources=example["defs"].resources)

    written = pa.concat_tables([places for _, places in imports])
    per_category = written.group_by("category").aggregate([("id", "count_distinct")]).to_pylist()
    expected = {row["category"]: row["id_count_distinct"] for row in per_category}
    assert expected == {"bakery": 1, "cafe": 4, "pub": 4}
    assert result.success
    assert result.output_for_node("places_per_category") == expected
    # The asset let go of the file: the store writes it at once.
    impatient = open_store(duckdb_url, lock_timeout=0.5)
    assert impatient.add_campaign("After", Targeting((PointLocation(53.8, -1.55, 2),), ("cafe",))) > 0
