"""The reader against an independent reading of the same sample release: blocks, countries, the antimeridian."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from overture_helpers import CURRENT, PREVIOUS, block_run, fiji_run

from bench.independent import expected_read
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.fetch import StaleIndex
from nakodo_dagster.overture.reader import PLACES_SCHEMA, longitude_ranges, query_column, query_tables, read_places
from nakodo_dagster.overture.sample import FIXED_PLACES
from nakodo_dagster.placement import (
    ImportRun,
    cell,
    cell_containing,
    cells_around,
    country_area,
    import_runs,
)


def _rows(result) -> list[tuple]:
    return [tuple(row.values()) for row in result.table.to_pylist()]


def _names(result, closed: bool = False) -> set[str]:
    """The names of the places read: those listed, or those read as closed."""
    return {row["name"] for row in result.table.to_pylist() if row["closed"] == closed}


@pytest.mark.parametrize("release", [CURRENT, PREVIOUS])
def test_a_block_reads_what_an_independent_reading_finds(index_dir, sample_root, expected, release):
    run = block_run(52.0, -2.0)
    assert run.bbox == (-2.0, 52.0, 0.0, 54.0)
    result = read_places(run, str(sample_root), release, index_dir=index_dir)
    assert result.table.schema == PLACES_SCHEMA
    assert _rows(result) == expected(release, run)
    assert result.table.num_rows > 10
    assert result.stats.rows == result.table.num_rows
    assert result.stats.files == 4
    assert result.stats.bytes_read > 0
    assert result.stats.requests is None
    assert result.schema == ("current" if release == CURRENT else "previous")


def _row_group_tables(root: Path, release: str) -> list[pa.Table]:
    """Every row group of the release, the query's columns, a table each: what the fetch hands on as they land."""
    tables = []
    for path in sorted((root / release).rglob("*.parquet")):
        parquet = pq.ParquetFile(path)
        leaves = [parquet.schema.column(i).path for i in range(parquet.metadata.num_columns)]
        wanted = [leaf for leaf in leaves if query_column(leaf)]
        tables += [parquet.read_row_group(i, columns=wanted) for i in range(parquet.num_row_groups)]
    return tables


@pytest.mark.parametrize("release", [CURRENT, PREVIOUS])
def test_a_block_finds_the_same_places_in_whatever_order_its_row_groups_land(sample_root, expected, release):
    run = block_run(52.0, -2.0)
    tables = _row_group_tables(sample_root, release)
    random.Random(3).shuffle(tables)

    one_by_one, schema = query_tables(run, release, iter(tables))
    all_at_once, _ = query_tables(run, release, iter([pa.concat_tables(tables)]))

    assert len(tables) == 100, "4,000 places in row groups of 40"
    assert one_by_one.equals(all_at_once)
    assert [tuple(row.values()) for row in one_by_one.to_pylist()] == expected(release, run)
    assert schema == ("current" if release == CURRENT else "previous")


def test_a_fetch_failing_after_row_groups_landed_raises_its_own_error(sample_root):
    # A StaleIndex that reached the reader as DuckDB's error would fail the run instead of rebuilding the index.
    tables = _row_group_tables(sample_root, CURRENT)

    def landing():
        yield from tables[:3]
        raise StaleIndex("part-00001.parquet changed or is gone since the index was built")

    with pytest.raises(StaleIndex, match="changed or is gone"):
        query_tables(block_run(52.0, -2.0), CURRENT, landing())


def test_a_block_leaves_out_unsure_places_and_reads_permanently_closed_ones_as_closed(index_dir, sample_root):
    result = read_places(block_run(52.0, -2.0), str(sample_root), CURRENT, index_dir=index_dir)
    names = _names(result)
    assert "Closed For Now Pub" in names
    assert "Half Sure Cafe" in names
    assert "Closed For Good Pub" not in names
    assert "Maybe Cafe" not in names
    assert "Closed For Good Pub" in _names(result, closed=True)
    # Overture sets a closed place's confidence to 0: read as closed all the same, never as a business.
    closed = [row for row in result.table.to_pylist() if row["closed"]]
    assert any(row["confidence"] == 0 for row in closed) and all(row["sources"] for row in closed)


def test_releases_without_operating_status_keep_places_overture_had_not_yet_marked(index_dir, sample_root):
    names = _names(read_places(block_run(52.0, -2.0), str(sample_root), PREVIOUS, index_dir=index_dir))
    # The previous schema has no operating_status: only confidence decides.
    assert {"Closed For Good Pub", "Half Sure Cafe"} <= names
    assert "Maybe Cafe" not in names


def test_a_category_takes_in_its_hierarchy_in_the_current_schema_only(index_dir, sample_root):
    run = block_run(52.0, -2.0, ("restaurant",))
    current = read_places(run, str(sample_root), CURRENT, index_dir=index_dir).table
    previous = read_places(run, str(sample_root), PREVIOUS, index_dir=index_dir).table
    assert "Leeds Trattoria" in current.column("name").to_pylist()
    assert "Leeds Trattoria" not in previous.column("name").to_pylist()
    assert len(current) > len(previous) > 0


def test_a_place_matching_several_categories_comes_back_once_for_each(index_dir, sample_root, expected):
    run = block_run(52.0, -2.0, ("cafe", "casual_eatery", "food_and_drink"))
    rows = _rows(read_places(run, str(sample_root), CURRENT, index_dir=index_dir))
    assert rows == expected(CURRENT, run)
    by_place = {}
    for row in rows:
        by_place.setdefault(row[0], []).append(row[2])
    cafes = [categories for categories in by_place.values() if "cafe" in categories]
    assert cafes and all(sorted(c) == ["cafe", "casual_eatery", "food_and_drink"] for c in cafes)


def test_places_on_edges_belong_to_the_cell_to_their_north_and_east(index_dir, sample_root):
    south = read_places(block_run(52.0, -2.0), str(sample_root), CURRENT, index_dir=index_dir).table.to_pylist()
    north = read_places(
        block_run(54.0, -2.0, ("bakery",)), str(sample_root), CURRENT, index_dir=index_dir
    ).table.to_pylist()
    assert {"Corner Pub": "cell:53.5,-1.5"}.items() <= {r["name"]: r["area"] for r in south}.items()
    assert "Block Edge Bakery" not in {r["name"] for r in south}
    assert {r["name"]: r["area"] for r in north}["Block Edge Bakery"] == "cell:54,-2"


def test_a_block_returns_only_the_pairs_it_reserved(index_dir, sample_root, expected):
    leeds, bradford = cell(53.5, -1.5).key, cell(53.5, -2.0).key
    run = ImportRun(
        (bradford, leeds), ("cafe", "pub"), (-2.0, 53.5, -1.0, 54.0), None, ((bradford, "cafe"), (leeds, "pub"))
    )
    result = read_places(run, str(sample_root), CURRENT, index_dir=index_dir)
    assert _rows(result) == expected(CURRENT, run)
    assert {(r["area"], r["category"]) for r in result.table.to_pylist()} == {(bradford, "cafe"), (leeds, "pub")}


def test_a_box_spanning_cells_it_was_not_asked_for_keeps_to_its_cells(index_dir, sample_root, expected):
    # Two cells on a diagonal: the box covers four, the run reserved two.
    cells = {c.key: c for c in (cell(53.5, -2.0), cell(53.0, -1.5))}
    (run,) = import_runs({key: ["cafe", "restaurant"] for key in cells}, cells)
    result = read_places(run, str(sample_root), CURRENT, index_dir=index_dir)
    assert _rows(result) == expected(CURRENT, run)
    assert set(result.table.column("area").to_pylist()) <= set(cells)


@pytest.mark.parametrize("release", [CURRENT, PREVIOUS])
def test_a_country_is_read_by_its_places_own_address_country(index_dir, sample_root, expected, release):
    switzerland = ImportRun(
        ("country:CH",), ("bakery", "cafe", "coffee_shop"), (5.96, 45.82, 10.49, 47.81), "CH",
        tuple(("country:CH", c) for c in ("bakery", "cafe", "coffee_shop")),
    )  # fmt: skip
    result = read_places(switzerland, str(sample_root), release, index_dir=index_dir)
    assert _rows(result) == expected(release, switzerland)
    names = _names(result)
    assert {"Rhine Cafe Basel", "Basler Beck", "Dreiland Coffee"} <= names
    # Inside Switzerland's box but French or German: Mulhouse, Saint-Louis, Hegenheim, Weil am Rhein.
    assert not names & {
        "Boulangerie Mulhouse", "Boulangerie Saint-Louis", "Cafe Hegenheim", "Baeckerei Weil am Rhein",
        "Baeckerei Freiburg", "Grenzgaenger Cafe",
    }  # fmt: skip
    assert set(result.table.column("country").to_pylist()) == {"CH"}
    assert set(result.table.column("area").to_pylist()) == {"country:CH"}


def test_france_takes_its_border_towns_and_leaves_basel_and_freiburg(index_dir, sample_root, expected):
    france = country_area("FR")
    run = ImportRun(
        (france.key,), ("bakery", "cafe"), france.bbox, "FR", ((france.key, "bakery"), (france.key, "cafe"))
    )
    result = read_places(run, str(sample_root), CURRENT, index_dir=index_dir)
    assert _rows(result) == expected(CURRENT, run)
    names = _names(result)
    assert {"Boulangerie Mulhouse", "Boulangerie Saint-Louis", "Cafe Hegenheim"} <= names
    assert not names & {"Basler Beck", "Rhine Cafe Basel", "Baeckerei Freiburg", "Baeckerei Weil am Rhein"}


@pytest.mark.parametrize("release", [CURRENT, PREVIOUS])
def test_a_country_across_the_antimeridian_is_read_whole_and_once(index_dir, sample_root, expected, release):
    run = fiji_run()
    assert run.bbox[0] > run.bbox[2]
    result = read_places(run, str(sample_root), release, index_dir=index_dir)
    rows = _rows(result)
    assert rows == expected(release, run)
    assert {"Taveuni West Cafe", "Taveuni East Cafe", "Dateline Coffee", "Dateline Coffee Too"} <= _names(result)
    longitudes = result.table.column("lng").to_pylist()
    assert min(longitudes) < -179 and max(longitudes) > 179
    assert len({(row[0], row[2]) for row in rows}) == len(rows)


def test_blocks_on_both_sides_of_the_antimeridian_put_each_place_in_one_cell(index_dir, sample_root, expected):
    cells = {c.key: c for c in cells_around(-16.8, 179.97, 25)}
    assert {"cell:-17,179.5", "cell:-17,-180"} <= set(cells)
    runs = import_runs({key: ["cafe", "coffee_shop"] for key in cells}, cells)
    assert len(runs) == 2
    rows = []
    for run in runs:
        result = read_places(run, str(sample_root), CURRENT, index_dir=index_dir)
        assert _rows(result) == expected(CURRENT, run)
        rows += result.table.to_pylist()
    areas = {r["name"]: r["area"] for r in rows}
    assert areas["Taveuni West Cafe"] == "cell:-17,179.5"
    assert areas["Taveuni East Cafe"] == "cell:-17,-180"
    assert areas["Dateline Coffee"] == areas["Dateline Coffee Too"] == "cell:-17,-180"
    assert len({(r["id"], r["category"]) for r in rows}) == len(rows)


def test_the_cell_key_in_sql_is_placements_for_every_place(index_dir, sample_root):
    table = read_places(_every_cell_run(sample_root), str(sample_root), CURRENT, index_dir=index_dir).table
    assert table.num_rows > 1_000
    for row in table.to_pylist():
        assert row["area"] == cell_containing(row["lat"], row["lng"]).key
    keys = set(table.column("area").to_pylist())
    assert {"cell:-90,0", "cell:89.5,0", "cell:0,32.5", "cell:51,0", "cell:51,-0.5", "cell:-17,-180"} <= keys
    assert all("-0" not in key.removeprefix("cell:").split(",") for key in keys)


def _every_cell_run(sample_root) -> ImportRun:
    """One run whose box is the globe and whose pairs are every cell holding a sample place."""
    boxes = ds.dataset(sample_root / CURRENT, format="parquet").to_table(columns=["bbox"]).column("bbox").to_pylist()
    keys = sorted({cell_containing((b["ymin"] + b["ymax"]) / 2, (b["xmin"] + b["xmax"]) / 2).key for b in boxes})
    categories = sorted({p.category for p in FIXED_PLACES})
    pairs = tuple((key, category) for key in keys for category in categories)
    return ImportRun(tuple(keys), tuple(categories), (-180.0, -90.0, 180.0, 90.0), None, pairs)


def test_bboxes_of_floats_as_overture_ships_them_read_the_same_places(index_dir, sample_root, tmp_path):
    floats = pa.struct([(name, pa.float32()) for name in ("xmin", "xmax", "ymin", "ymax")])
    folder = tmp_path / CURRENT / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    for path in (sample_root / CURRENT / "theme=places" / "type=place").iterdir():
        table = pq.read_table(path)
        table = table.set_column(table.schema.get_field_index("bbox"), "bbox", table.column("bbox").cast(floats))
        pq.write_table(table, folder / path.name, row_group_size=40)
    run = block_run(52.0, -2.0)
    result = read_places(run, str(tmp_path), CURRENT, index_dir=index_dir)
    assert _rows(result) == expected_read(tmp_path, CURRENT, run)
    doubles = read_places(run, str(sample_root), CURRENT, index_dir=index_dir).table
    assert result.table.select(["id", "category", "area"]).equals(doubles.select(["id", "category", "area"]))


def test_longitude_ranges_cover_both_halves_and_the_antimeridian():
    assert longitude_ranges(-2.0, 0.0) == [(-2.0, 0.0)]
    assert longitude_ranges(177.0, -178.2) == [(177.0, 180.0), (-180.0, -178.2), (180.0, 180.0)]
    assert longitude_ranges(-180.0, -178.0) == [(-180.0, -178.0), (180.0, 180.0)]


def test_a_release_that_is_not_there_is_named_with_what_is(index_dir, sample_root):
    with pytest.raises(InvalidInput, match=r"2026-01-01\.0.*last two releases.*2026-10-15\.0, 2026-11-18\.0"):
        read_places(block_run(52.0, -2.0), str(sample_root), "2026-01-01.0", index_dir=index_dir)
    with pytest.raises(InvalidInput, match=r"YYYY-MM-DD\.N"):
        read_places(block_run(52.0, -2.0), str(sample_root), "../2026-11-18.0", index_dir=index_dir)


def test_a_country_run_reads_exactly_its_country_area(index_dir, sample_root):
    run = ImportRun(("cell:0,0",), ("cafe",), (0.0, 0.0, 1.0, 1.0), "FR", (("cell:0,0", "cafe"),))
    with pytest.raises(InvalidInput, match="country:FR"):
        read_places(run, str(sample_root), CURRENT, index_dir=index_dir)
