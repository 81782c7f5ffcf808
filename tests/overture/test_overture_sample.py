"""Sample releases look like Overture's: layout, schema, GeoParquet metadata, spatial sort, edge cases, determinism."""

from __future__ import annotations

import json
import re
import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
import shapely
from overture_helpers import CURRENT, PREVIOUS

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.sample import (
    CITIES,
    FIXED_PLACES,
    TAXONOMY,
    ReleaseDrift,
    border_country,
    places_schema,
    write_sample_release,
)

PART = re.compile(r"part-\d{5}-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}-c000\.zstd\.parquet")


def _files(sample_root, release):
    return sorted((sample_root / release / "theme=places" / "type=place").iterdir())


def _places(sample_root, release) -> pa.Table:
    return ds.dataset(sample_root / release / "theme=places" / "type=place", format="parquet").to_table()


def test_a_release_is_laid_out_as_overtures(sample_root):
    assert sorted(p.name for p in sample_root.iterdir()) == [PREVIOUS, CURRENT]
    files = _files(sample_root, CURRENT)
    assert len(files) == 4
    assert all(PART.fullmatch(f.name) for f in files)
    assert sum(pq.ParquetFile(f).metadata.num_rows for f in files) == 4_000
    assert all(pq.ParquetFile(f).metadata.num_row_groups == 25 for f in files)
    assert pq.ParquetFile(files[0]).metadata.row_group(0).column(0).compression == "ZSTD"


def test_ids_are_distinct_random_version_4_uuids_as_overtures_are(sample_root):
    ids = _places(sample_root, CURRENT).column("id").to_pylist()
    parsed = [uuid.UUID(i) for i in ids]
    assert [str(u) for u in parsed] == ids
    assert {(u.version, u.variant) for u in parsed} == {(4, uuid.RFC_4122)}
    assert len(set(ids)) == len(ids)
    # Random over the whole range: every leading hex digit occurs among 4,000 ids.
    assert {i[0] for i in ids} == set("0123456789abcdef")


def test_the_current_schema_has_taxonomy_and_operating_status(sample_root):
    schema = pq.read_schema(_files(sample_root, CURRENT)[0]).remove_metadata()
    assert schema == places_schema("current")
    assert schema.field("bbox").type == pa.struct(
        [("xmin", pa.float64()), ("xmax", pa.float64()), ("ymin", pa.float64()), ("ymax", pa.float64())]
    )
    assert schema.field("geometry").type == pa.binary()
    assert schema.field("basic_category").type == pa.string()
    assert schema.field("taxonomy").type == pa.struct(
        [("primary", pa.string()), ("hierarchy", pa.list_(pa.string())), ("alternates", pa.list_(pa.string()))]
    )
    assert schema.field("operating_status").type == pa.string()
    assert schema.field("confidence").type == pa.float64()
    for name in ("websites", "socials", "emails", "phones"):
        assert schema.field(name).type == pa.list_(pa.string())
    address = schema.field("addresses").type.value_type
    assert [address.field(i).name for i in range(address.num_fields)] == [
        "freeform", "locality", "postcode", "region", "country",
    ]  # fmt: skip
    assert "categories" not in schema.names


def test_the_previous_schema_has_categories_and_no_operating_status(sample_root):
    schema = pq.read_schema(_files(sample_root, PREVIOUS)[0]).remove_metadata()
    assert schema == places_schema("previous")
    assert schema.field("categories").type == pa.struct(
        [("primary", pa.string()), ("alternate", pa.list_(pa.string()))]
    )
    assert not {"taxonomy", "basic_category", "operating_status"} & set(schema.names)


def test_files_carry_geoparquet_metadata_with_the_bbox_covering(sample_root):
    for path in _files(sample_root, CURRENT):
        geo = json.loads(pq.read_schema(path).metadata[b"geo"])
        assert geo["version"] == "1.1.0"
        assert geo["primary_column"] == "geometry"
        column = geo["columns"]["geometry"]
        assert column["encoding"] == "WKB"
        assert column["geometry_types"] == ["Point"]
        assert column["covering"] == {"bbox": {k: ["bbox", k] for k in ("xmin", "ymin", "xmax", "ymax")}}
        bbox = pq.read_table(path, columns=["bbox"]).column("bbox").combine_chunks()
        assert column["bbox"] == [
            min(bbox.field("xmin").to_pylist()),
            min(bbox.field("ymin").to_pylist()),
            max(bbox.field("xmax").to_pylist()),
            max(bbox.field("ymax").to_pylist()),
        ]


def test_geometry_is_the_wkb_point_its_bbox_describes(sample_root):
    table = _places(sample_root, CURRENT)
    points = shapely.from_wkb(table.column("geometry").to_numpy(zero_copy_only=False))
    bbox = table.column("bbox").combine_chunks()
    assert (shapely.get_type_id(points) == 0).all()
    np.testing.assert_array_equal(shapely.get_x(points), bbox.field("xmin").to_numpy())
    np.testing.assert_array_equal(shapely.get_x(points), bbox.field("xmax").to_numpy())
    np.testing.assert_array_equal(shapely.get_y(points), bbox.field("ymin").to_numpy())


def _row_groups_touching(files, west, south, east, north) -> tuple[int, int]:
    touching = total = 0
    for path in files:
        metadata = pq.ParquetFile(path).metadata
        names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            stats = {
                name: group.column(names.index(f"bbox.{name}")).statistics for name in ("xmin", "xmax", "ymin", "ymax")
            }
            total += 1
            if stats["xmax"].min <= east and stats["xmin"].max >= west:
                touching += stats["ymax"].min <= north and stats["ymin"].max >= south
    return touching, total


def test_the_spatial_sort_lets_row_group_statistics_prune(sample_root):
    touching, total = _row_groups_touching(_files(sample_root, CURRENT), -2.0, 52.0, 0.0, 54.0)
    assert total == 100
    assert 1 <= touching <= total // 10


def test_the_default_shape_is_overtures_256_row_groups_a_file(tmp_path):
    release = write_sample_release(tmp_path, rows=4 * 256 * 3, files=4, progress=False)
    files = sorted((release / "theme=places" / "type=place").iterdir())
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in files] == [256] * 4


def test_places_cluster_around_the_documented_cities(sample_root):
    bbox = _places(sample_root, CURRENT).column("bbox").combine_chunks()
    lat, lng = bbox.field("ymin").to_numpy(), bbox.field("xmin").to_numpy()
    nearest = np.min(
        [np.hypot(lat - c.lat, (lng - c.lng) * np.cos(np.radians(c.lat))) for c in CITIES] + [[1e9] * len(lat)], axis=0
    )
    fixed = {(f.lat, f.lng) for f in FIXED_PLACES}
    far = [(a, b) for a, b, d in zip(lat, lng, nearest, strict=True) if d > 1.0 and (a, b) not in fixed]
    assert len(far) < 10
    assert len(CITIES) >= 40


def test_every_edge_case_place_is_in_every_release(sample_root):
    for release in (CURRENT, PREVIOUS):
        names = set(_places(sample_root, release).column("names").combine_chunks().field("primary").to_pylist())
        assert {f.name for f in FIXED_PLACES} <= names


def test_categories_come_from_overtures_taxonomy(sample_root):
    table = _places(sample_root, CURRENT)
    taxonomy = table.column("taxonomy").to_pylist()
    known = {c.primary: c for c in TAXONOMY}
    assert len(known) >= 30
    assert known["italian_restaurant"].hierarchy[:2] == ("food_and_drink", "restaurant")
    for entry, basic in zip(taxonomy, table.column("basic_category").to_pylist(), strict=True):
        category = known[entry["primary"]]
        assert entry["hierarchy"] == list(category.hierarchy)
        assert entry["hierarchy"][-1] == entry["primary"]
        assert basic == category.basic
        assert not set(entry["alternates"] or []) & set(entry["hierarchy"])
    assert sum(1 for entry in taxonomy if entry["alternates"]) > 100
    previous = _places(sample_root, PREVIOUS).column("categories").to_pylist()
    assert {entry["primary"] for entry in previous} <= set(known)


def test_the_release_has_what_a_reader_must_leave_out_or_handle(sample_root):
    places = _places(sample_root, CURRENT).to_pylist()
    confidence = [p["confidence"] for p in places]
    assert sum(c is not None and c < 0.5 for c in confidence) > 100
    assert sum(c is None for c in confidence) > 10
    closed = [p for p in places if p["operating_status"] == "permanently_closed"]
    assert len(closed) > 50 and any(p["confidence"] == 0 for p in closed) and any(p["confidence"] for p in closed)
    assert sum(p["operating_status"] == "temporarily_closed" for p in places) > 20
    assert sum(p["addresses"] is None for p in places) > 100
    assert sum(len(p["addresses"] or []) > 1 for p in places) > 50
    assert sum(p["websites"] is not None for p in places) > 1000
    assert sum(p["phones"] is not None for p in places) > 1000
    longitudes = [p["bbox"]["xmin"] for p in places]
    assert {179.9, -179.9, 180.0, -180.0} <= set(longitudes)


def test_basel_border_places_carry_the_country_of_their_side(sample_root):
    places = _places(sample_root, CURRENT).to_pylist()
    near_basel = [
        p for p in places if p["addresses"] and 47.3 < p["bbox"]["ymin"] < 48.3 and 7.0 < p["bbox"]["xmin"] < 8.3
    ]
    countries = {p["addresses"][0]["country"] for p in near_basel}
    assert countries == {"CH", "DE", "FR"}
    random = [p for p in near_basel if p["names"]["primary"] not in {f.name for f in FIXED_PLACES}]
    lat = np.array([p["bbox"]["ymin"] for p in random])
    lng = np.array([p["bbox"]["xmin"] for p in random])
    assert [p["addresses"][0]["country"] for p in random] == list(border_country(lat, lng))
    towns = {"Basel": (47.5596, 7.5886), "Saint-Louis": (47.59, 7.56), "Weil am Rhein": (47.595, 7.62)}
    towns |= {"Mulhouse": (47.75, 7.3359), "Freiburg": (47.999, 7.8421), "Hegenheim": (47.562, 7.53)}
    lat, lng = (np.array(values) for values in zip(*towns.values(), strict=True))
    assert list(border_country(lat, lng)) == ["CH", "FR", "DE", "FR", "DE", "FR"]


def test_the_same_seed_writes_the_same_release(tmp_path):
    tables = []
    for name, seed in (("a", 5), ("b", 5), ("c", 6)):
        release = write_sample_release(tmp_path / name, rows=600, files=3, row_group_rows=50, seed=seed, progress=False)
        tables.append(ds.dataset(release, format="parquet").to_table())
    assert tables[0].equals(tables[1])
    assert not tables[0].equals(tables[2])
    assert sorted(p.name for p in (tmp_path / "a" / CURRENT / "theme=places" / "type=place").iterdir()) == sorted(
        p.name for p in (tmp_path / "b" / CURRENT / "theme=places" / "type=place").iterdir()
    )


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"rows": 3}, "rows 3 is not allowed"),
        ({"rows": 100, "files": 200}, "every file needs at least one place"),
        ({"files": 0}, "files 0 is not allowed"),
        ({"row_group_rows": 0}, "row_group_rows 0 is not allowed"),
        ({"schema": "2025"}, "use 'current'"),
        ({"release": "latest"}, "YYYY-MM-DD.N"),
        ({"seed": -1}, "seed -1 is not allowed"),
    ],
)
def test_bad_arguments_say_what_is_allowed(tmp_path, arguments, message):
    with pytest.raises(InvalidInput, match=re.escape(message)):
        write_sample_release(tmp_path, **({"rows": 100, "progress": False} | arguments))
    assert not any(tmp_path.iterdir())


def test_an_existing_release_is_never_overwritten(tmp_path):
    write_sample_release(tmp_path, rows=100, files=1, progress=False)
    with pytest.raises(InvalidInput, match="already exists"):
        write_sample_release(tmp_path, rows=100, files=1, progress=False)
    assert [p.name for p in tmp_path.iterdir()] == [CURRENT]


def test_a_next_release_drops_and_inflates_what_it_is_told_and_keeps_the_rest_by_id(tmp_path):
    sample = {"rows": 5_000, "files": 2, "row_group_rows": 200, "seed": 5, "progress": False}
    write_sample_release(tmp_path, release=PREVIOUS, **sample)
    write_sample_release(tmp_path, release=CURRENT, drift=ReleaseDrift(drop=("bakery",), inflate=("pub",)), **sample)
    before, after = _places(tmp_path, PREVIOUS), _places(tmp_path, CURRENT)
    assert after.schema == before.schema == places_schema("current")

    def ids(table: pa.Table, category: str | None = None) -> set[str]:
        if category is not None:
            table = table.filter(pc.equal(pc.struct_field(table["taxonomy"], "primary"), category))
        return set(table["id"].to_pylist())

    # A month's churn: about 3 % of the places gone and as many new, the rest the same places by id.
    others = ids(before) - ids(before, "bakery")
    assert 0.95 < len(others & ids(after)) / len(others) < 0.99
    cafes = ids(before, "cafe")
    assert 0.95 < len(cafes & ids(after, "cafe")) / len(cafes) < 0.99
    # Bakeries: about a tenth stay. Pubs: each one kept, and three new ones for each.
    bakeries = ids(before, "bakery")
    assert len(ids(after, "bakery")) < 0.2 * len(bakeries)
    pubs = ids(before, "pub")
    assert 3.5 * len(pubs) < len(ids(after, "pub")) < 4.5 * len(pubs)

    # Every edge-case place is still there, under the same id.
    def fixed_ids(table: pa.Table) -> dict[tuple, str]:
        at = zip(
            pc.struct_field(table["names"], "primary").to_pylist(),
            pc.struct_field(table["bbox"], "ymin").to_pylist(),
            pc.struct_field(table["bbox"], "xmin").to_pylist(),
            table["id"].to_pylist(),
            strict=True,
        )
        fixed = {(place.name, place.lat, place.lng) for place in FIXED_PLACES}
        return {(name, lat, lng): id_ for name, lat, lng, id_ in at if (name, lat, lng) in fixed}

    assert len(fixed_ids(before)) == len(FIXED_PLACES)
    assert fixed_ids(after) == fixed_ids(before)


@pytest.mark.parametrize(
    ("drift", "message"),
    [
        ({"drop": ("croissant",)}, "not in the sample's taxonomy"),
        ({"drop": ("pub",), "inflate": ("pub",)}, "both dropped and inflated"),
        ({"churn": 1.0}, "churn 1.0 is not allowed"),
    ],
)
def test_a_drift_that_cannot_be_right_is_refused(drift, message):
    with pytest.raises(InvalidInput, match=message):
        ReleaseDrift(**drift)
