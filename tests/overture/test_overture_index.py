"""The release index: footers read once and reused, pruning by row-group statistics, and the same rows as DuckDB."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow.parquet as pq
import pytest
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from overture_helpers import CURRENT, PREVIOUS, block_run, fiji_run

from nakodo_dagster.overture import index as release_index
from nakodo_dagster.overture.index import (
    HOLE_BUDGET,
    build_index,
    fetch_plan,
    index_path,
    load_index,
    plan_requests,
    sign_v4,
)
from nakodo_dagster.overture.reader import longitude_ranges, query_column, read_places
from nakodo_dagster.placement import ImportRun, country_area

SWITZERLAND = ImportRun(
    ("country:CH",), ("bakery", "cafe"), (5.96, 45.82, 10.49, 47.81), "CH",
    (("country:CH", "bakery"), ("country:CH", "cafe")),
)  # fmt: skip
FRANCE = ImportRun(
    ("country:FR",),
    ("bakery", "cafe"),
    country_area("FR").bbox,
    "FR",
    (("country:FR", "bakery"), ("country:FR", "cafe")),
)
RUNS = {
    "block": block_run(52.0, -2.0),
    "block across the antimeridian": block_run(-18.0, -180.0, ("cafe", "coffee_shop")),
    "country": SWITZERLAND,
    "country with a wide box": FRANCE,
    "antimeridian country": fiji_run(),
}


def _files(root: Path, release: str) -> list[Path]:
    return sorted((root / release / "theme=places" / "type=place").glob("*.parquet"))


@pytest.mark.parametrize("release", [CURRENT, PREVIOUS])
@pytest.mark.parametrize("name", list(RUNS))
def test_the_index_reads_exactly_what_duckdb_reads(sample_root, tmp_path, expected, release, name):
    run = RUNS[name]
    with_index = read_places(run, str(sample_root), release, index_dir=tmp_path)
    without = read_places(run, str(sample_root), release, index_dir=None)
    assert with_index.table.equals(without.table)
    assert [tuple(r.values()) for r in with_index.table.to_pylist()] == expected(release, run)
    assert with_index.table.num_rows > 0
    assert with_index.schema == without.schema
    assert with_index.stats.files == without.stats.files == 4


@pytest.mark.parametrize("release", [CURRENT, PREVIOUS])
@pytest.mark.parametrize("name", ["block", "antimeridian country"])
def test_the_index_on_s3_reads_what_duckdb_reads_with_only_range_requests(s3_root, tmp_path, release, name):
    run = RUNS[name]
    first = read_places(run, s3_root, release, index_dir=tmp_path)
    again = read_places(run, s3_root, release, index_dir=tmp_path)
    duckdb = read_places(run, s3_root, release, index_dir=None)
    assert first.table.equals(duckdb.table) and again.table.equals(duckdb.table)
    # The first read paid for the footers; the next one fetches only the row groups' columns.
    index = load_index(index_path(s3_root, release, tmp_path))
    west, south, east, north = run.bbox
    rows = index.intersecting(south, north, longitude_ranges(west, east))
    chunks = index.chunks(rows, query_column)
    assert again.stats.requests == len(fetch_plan(index, rows, query_column))
    needed = sum(length for *_, length in chunks)
    assert needed <= again.stats.bytes_read <= (1 + HOLE_BUDGET) * needed
    assert first.stats.requests >= 4 + again.stats.requests
    assert again.stats.bytes_read * 5 < duckdb.stats.bytes_read


def test_the_index_is_built_once_and_reused_across_calls_and_processes(sample_root, tmp_path, monkeypatch):
    builds = []
    real_build = release_index.build_index

    def counting_build(*args, **kwargs):
        builds.append(args)
        return real_build(*args, **kwargs)

    monkeypatch.setattr("nakodo_dagster.overture.reader.build_index", counting_build)
    run = RUNS["block"]
    first = read_places(run, str(sample_root), CURRENT, index_dir=tmp_path)
    path = index_path(sample_root, CURRENT, tmp_path)
    built = path.stat().st_mtime_ns
    again = read_places(run, str(sample_root), CURRENT, index_dir=tmp_path)
    assert len(builds) == 1 and again.table.equals(first.table)
    assert again.stats.bytes_read < first.stats.bytes_read / 5
    code = (
        "import sys; sys.path.insert(0, 'tests/overture');"
        "from overture_helpers import block_run;"
        "from nakodo_dagster.overture import reader;"
        "reader.build_index = None;"  # Another process must find the index, not build one.
        f"result = reader.read_places(block_run(52.0, -2.0), {str(sample_root)!r}, {CURRENT!r}, "
        f"index_dir={str(tmp_path)!r});"
        "print(result.table.num_rows)"
    )
    output = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=Path(__file__).parents[2]
    )
    assert int(output.stdout) == first.table.num_rows
    assert path.stat().st_mtime_ns == built
    assert path.parent.parent == tmp_path and path.name == f"{CURRENT}.parquet"


@pytest.mark.parametrize("release", [CURRENT, PREVIOUS])
def test_the_index_holds_what_the_footers_say(sample_root, tmp_path, release):
    index, cost = build_index(sample_root, release, tmp_path)
    files = _files(sample_root, release)
    assert index.files == tuple(str(f) for f in files)
    assert cost.requests is None and cost.bytes > 0
    rows = pq.read_table(index.path, columns=["file", "row_group", "rows", "xmin", "xmax", "ymin", "ymax", "chunks"])
    rows = rows.to_pylist()
    assert len(index.row_groups) == len(rows) == sum(pq.read_metadata(f).num_row_groups for f in files)
    for number, path in enumerate(files):
        metadata = pq.read_metadata(path)
        assert index.footer(number).equals(metadata)
        assert index.sizes[number] == path.stat().st_size
        mine = [row for row in rows if row["file"] == str(path)]
        for group_number, row in enumerate(mine):
            group = metadata.row_group(group_number)
            leaves = {group.column(i).path_in_schema: group.column(i) for i in range(group.num_columns)}
            assert row["row_group"] == group_number and row["rows"] == group.num_rows
            assert row["xmin"] == leaves["bbox.xmin"].statistics.min
            assert row["xmax"] == leaves["bbox.xmax"].statistics.max
            assert row["ymin"] == leaves["bbox.ymin"].statistics.min
            assert row["ymax"] == leaves["bbox.ymax"].statistics.max
            assert [c["column"] for c in row["chunks"]] == list(leaves)
            for chunk in row["chunks"]:
                column = leaves[chunk["column"]]
                start = min(column.data_page_offset, column.dictionary_page_offset or column.data_page_offset)
                assert (chunk["offset"], chunk["length"]) == (start, column.total_compressed_size)


@pytest.mark.parametrize("name", list(RUNS))
def test_pruning_selects_exactly_the_row_groups_whose_statistics_meet_the_box(sample_root, tmp_path, name):
    run = RUNS[name]
    index, _ = build_index(sample_root, CURRENT, tmp_path)
    west, south, east, north = run.bbox
    ranges = longitude_ranges(west, east)
    selected = {
        (row["file"], row["row_group"])
        for row in index.row_groups.take(index.intersecting(south, north, ranges)).to_pylist()
    }
    meeting, holding = set(), set()
    for path in _files(sample_root, CURRENT):
        parquet = pq.ParquetFile(path)
        for number in range(parquet.num_row_groups):
            stats = {
                parquet.metadata.row_group(number).column(i).path_in_schema: parquet.metadata.row_group(number)
                .column(i)
                .statistics
                for i in range(parquet.metadata.num_columns)
            }
            box = [stats[f"bbox.{f}"] for f in ("xmin", "xmax", "ymin", "ymax")]
            if (
                box[3].max >= south
                and box[2].min <= north
                and any(box[1].max >= w and box[0].min <= e for w, e in ranges)
            ):
                meeting.add((str(path), number))
            places = parquet.read_row_group(number, columns=["bbox"]).column("bbox").to_pylist()
            if any(south <= p["ymin"] <= north and any(w <= p["xmin"] <= e for w, e in ranges) for p in places):
                holding.add((str(path), number))
    assert selected == meeting
    assert holding <= selected and holding
    assert len(selected) < len(index.row_groups) / 2


def test_a_rewritten_release_file_rebuilds_the_index(sample_root, tmp_path):
    root = tmp_path / "root"
    folder = root / CURRENT / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    for path in _files(sample_root, CURRENT):
        (folder / path.name).write_bytes(path.read_bytes())
    run = RUNS["block"]
    before = read_places(run, str(root), CURRENT, index_dir=tmp_path / "index")
    # The same names, fewer places: an index of the old files would read the wrong bytes.
    for path in folder.iterdir():
        table = pq.read_table(path)
        pq.write_table(table.take(list(range(0, table.num_rows, 2))), path, row_group_size=40)
        os.utime(path, ns=(1, 1))
    after = read_places(run, str(root), CURRENT, index_dir=tmp_path / "index")
    assert after.table.equals(read_places(run, str(root), CURRENT, index_dir=None).table)
    assert 0 < after.table.num_rows < before.table.num_rows


def test_requests_cover_every_chunk_read_holes_within_budget_and_split_long_ranges(monkeypatch):
    rng = np.random.default_rng(3)
    chunks = []
    for file_number in range(3):
        offset = 4
        for group in range(50):
            for _ in range(6):
                length = int(rng.integers(100, 5_000))
                if rng.random() < 0.6:
                    chunks.append((file_number, group, offset, length))
                offset += length
    requests = plan_requests(chunks)
    for file_number, _, offset, length in chunks:
        assert any(f == file_number and o <= offset and offset + length <= o + n for f, o, n in requests)
    needed = sum(length for *_, length in chunks)
    assert needed <= sum(n for *_, n in requests) <= (1 + HOLE_BUDGET) * needed
    assert len(requests) < len(chunks) / 4
    monkeypatch.setattr(release_index, "MIN_PIECE_BYTES", 10_000)
    split = plan_requests(chunks)
    assert len(split) >= release_index.FETCH_WORKERS
    assert sum(n for *_, n in split) == sum(n for *_, n in requests)


def test_signed_requests_match_botocore(monkeypatch):
    settings = {"region": "us-west-2", "key_id": "AKID", "secret": "secret", "session_token": "token"}
    url = "http://127.0.0.1:9000/bucket/release/2026-11-18.0/theme%3Dplaces/type%3Dplace/part-0.parquet"
    now = dt.datetime(2026, 12, 2, 12, 0, 0)
    mine = sign_v4("GET", url, {"Range": "bytes=0-99"}, settings, now.strftime("%Y%m%dT%H%M%SZ"))
    monkeypatch.setattr("botocore.auth.get_current_datetime", lambda: now)
    request = AWSRequest("GET", url, headers={"Range": "bytes=0-99"})
    # S3 GETs are signed with an unsigned payload, as this client signs them.
    request.context["client_config"] = SimpleNamespace(s3={"payload_signing_enabled": False})
    S3SigV4Auth(Credentials("AKID", "secret", "token"), "s3", "us-west-2").add_auth(request)
    assert mine["Authorization"] == request.headers["Authorization"]
    assert mine["x-amz-security-token"] == "token"
