"""The release index: footers read once and reused, pruning by row-group statistics, and the same rows as DuckDB."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import numpy as np
import pyarrow.parquet as pq
import pytest
from overture_helpers import CURRENT, PREVIOUS, block_run, fiji_run

from nakodo_dagster.jobs import passing_fault
from nakodo_dagster.overture import fetch as release_fetch
from nakodo_dagster.overture import index as release_index
from nakodo_dagster.overture import ranges as release_ranges
from nakodo_dagster.overture.faults import PASSING_KINDS, ReadFailed, read_with_retries
from nakodo_dagster.overture.fetch import StaleIndex, landing_row_groups
from nakodo_dagster.overture.index import (
    arrow_reads_past_chunks,
    build_index,
    index_folder,
    index_path,
    load_index,
    read_chunks,
    read_footers,
)
from nakodo_dagster.overture.ranges import HOLE_BUDGET, carried_row_groups, plan_requests
from nakodo_dagster.overture.reader import longitude_ranges, plan_read, query_column, read_places
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


def _copied_release(sample_root: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the current sample release that a test may rewrite: its root and its places' folder."""
    root = tmp_path / "root"
    folder = root / CURRENT / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    for path in _files(sample_root, CURRENT):
        (folder / path.name).write_bytes(path.read_bytes())
    return root, folder


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
    chunks = read_chunks(index, rows, query_column)
    assert again.stats.requests == len(plan_requests(chunks))
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
@pytest.mark.parametrize("tail", [release_index.TAIL_BYTES, 1024], ids=["footer in the tail", "footer past the tail"])
def test_the_index_holds_what_the_footers_say(sample_root, tmp_path, monkeypatch, release, tail):
    monkeypatch.setattr(release_index, "TAIL_BYTES", tail)
    index, cost = build_index(sample_root, release, tmp_path)
    files = _files(sample_root, release)
    assert index.files == tuple(str(f) for f in files)
    assert cost.requests is None and cost.bytes > 0
    rows = pq.read_table(index.path, columns=["file", "row_group", "rows", "xmin", "xmax", "ymin", "ymax", "chunks"])
    rows = rows.to_pylist()
    assert len(index.row_groups) == len(rows) == sum(pq.read_metadata(f).num_row_groups for f in files)
    for number, path in enumerate(files):
        metadata = pq.read_metadata(path)
        assert release_fetch.parse_footer(read_footers(index, [number])[number]).equals(metadata)
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


def test_an_index_holds_the_ranges_of_the_columns_it_was_built_for_and_a_read_wanting_others_rebuilds_it(
    sample_root, tmp_path
):
    def bbox_only(leaf: str) -> bool:
        return leaf.startswith("bbox.")

    index, _ = build_index(sample_root, CURRENT, tmp_path, bbox_only)
    for row in pq.read_table(index.path, columns=["chunks"]).column("chunks").to_pylist():
        assert [c["offset"] >= 0 for c in row] == [bbox_only(c["column"]) for c in row]
    every_row_group = np.arange(len(index.row_groups))
    assert len(read_chunks(index, every_row_group, bbox_only)) == 4 * len(every_row_group)
    with pytest.raises(StaleIndex, match="built for other columns"):
        read_chunks(index, every_row_group, query_column)
    run = RUNS["country"]
    read = read_places(run, str(sample_root), CURRENT, index_dir=tmp_path)
    assert read.table.equals(read_places(run, str(sample_root), CURRENT, index_dir=None).table)
    rebuilt = load_index(index.path)
    assert len(read_chunks(rebuilt, every_row_group, query_column)) > len(every_row_group)


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


def test_row_groups_land_whole_and_leaving_early_stops_the_fetch(sample_root, tmp_path):
    index, _ = build_index(sample_root, CURRENT, tmp_path)
    every_row_group = np.arange(len(index.row_groups))
    with landing_row_groups(str(sample_root), plan_read(index, every_row_group, query_column)) as landing:
        landed = list(landing)
    assert sum(table.num_rows for table in landed) == sum(
        pq.ParquetFile(p).metadata.num_rows for p in _files(sample_root, CURRENT)
    )

    with landing_row_groups(str(sample_root), plan_read(index, every_row_group, query_column)) as landing:
        first = next(iter(landing))
    assert first.num_rows > 0
    assert not [thread for thread in threading.enumerate() if thread.name == "row-group-fetch"]


def test_a_rewritten_release_file_rebuilds_the_index(sample_root, tmp_path):
    root, folder = _copied_release(sample_root, tmp_path)
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


def _cut_short(folder: Path) -> tuple[Path, bytes]:
    """The release's first file cut to half its bytes (its footer gone), and its whole bytes."""
    cut = sorted(folder.iterdir())[0]
    whole = cut.read_bytes()
    cut.write_bytes(whole[: len(whole) // 2])
    return cut, whole


@pytest.mark.faults
def test_a_release_file_cut_short_under_the_read_is_a_passing_fault_and_reads_once_restored(sample_root, tmp_path):
    root, folder = _copied_release(sample_root, tmp_path)
    run = RUNS["block"]
    before = read_places(run, str(root), CURRENT, index_dir=tmp_path / "index")
    # The import began reading before the file was cut (a step's first try, the file replaced in place meanwhile).
    began = datetime.now(UTC) - timedelta(seconds=1)
    cut, whole = _cut_short(folder)

    with pytest.raises(ReadFailed) as failed:
        read_with_retries(lambda: read_places(run, str(root), CURRENT, index_dir=tmp_path / "index", began=began))
    # Tried again by the import step (passing_fault), not marked failed for 7 days at the first read.
    assert failed.value.fault.kind == "changed" and failed.value.fault.kind in PASSING_KINDS
    assert str(failed.value) == (
        f"file {cut.name} changed while it was read and is unreadable since (truncated or being replaced)"
    )
    assert passing_fault(failed.value) == "The Overture release could not be read"

    cut.write_bytes(whole)
    assert read_places(run, str(root), CURRENT, index_dir=tmp_path / "index").table.equals(before.table)


@pytest.mark.faults
def test_a_release_file_cut_short_before_the_import_is_unreadable_though_an_index_knew_it_whole(sample_root, tmp_path):
    root, folder = _copied_release(sample_root, tmp_path)
    run = RUNS["block"]
    read_places(run, str(root), CURRENT, index_dir=tmp_path / "index")
    cut, _ = _cut_short(folder)
    # The import begins after the cut: its index, built from the whole file, is all that says it changed.
    began = datetime.fromtimestamp(cut.stat().st_mtime, UTC) + timedelta(seconds=1)

    with pytest.raises(ReadFailed) as failed:
        read_with_retries(lambda: read_places(run, str(root), CURRENT, index_dir=tmp_path / "index", began=began))
    assert failed.value.fault.kind == "unreadable"
    assert str(failed.value) == f"file {cut.name} is unreadable (truncated or not Parquet)"
    assert passing_fault(failed.value) is None, "not tried again: it was unreadable from this import's first read"


@pytest.mark.faults
def test_a_release_file_unreadable_from_its_first_read_is_not_a_passing_fault(sample_root, tmp_path):
    root = tmp_path / "root"
    folder = root / CURRENT / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    for path in _files(sample_root, CURRENT):
        data = path.read_bytes()
        (folder / path.name).write_bytes(data[: len(data) // 2])

    with pytest.raises(ReadFailed) as failed:
        read_with_retries(lambda: read_places(RUNS["block"], str(root), CURRENT, index_dir=tmp_path / "index"))
    assert failed.value.fault.kind == "unreadable"
    assert passing_fault(failed.value) is None


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
    # A row group waits for every request that carries bytes of one of its chunks.
    row_groups, first_met, past_met = carried_row_groups(requests, chunks)
    waits = [{tuple(key) for key in row_groups[a:b].tolist()} for a, b in zip(first_met, past_met, strict=True)]
    for file_number, group, offset, length in chunks:
        for (f, o, n), met in zip(requests.tolist(), waits, strict=True):
            if f == file_number and o < offset + length and offset < o + n:
                assert (file_number, group) in met
    # Some holes were read through: fewer requests than runs of adjacent chunks.
    runs = sum(1 for i, c in enumerate(chunks) if i == 0 or chunks[i - 1][0] != c[0] or sum(chunks[i - 1][2:]) != c[2])
    assert len(requests) < runs
    monkeypatch.setattr(release_ranges, "MIN_PIECE_BYTES", 10_000)
    split = plan_requests(chunks)
    assert len(split) >= release_ranges.FETCH_WORKERS
    assert sum(n for *_, n in split) == sum(n for *_, n in requests)


def test_small_holes_are_read_through_even_when_the_requests_would_fit_the_connections():
    # Ten needed chunks of one file with nine holes between them: eight of 100 bytes, one of 50,000. The small ones
    # cost 0.8% of the needed bytes and save eight requests; the large one is kept out.
    chunks, offset = [], 4
    for group in range(10):
        chunks.append((0, group, offset, 10_000))
        offset += 10_000 + (50_000 if group == 4 else 100)
    requests = plan_requests(chunks)
    assert requests.tolist() == [[0, 4, 50_400], [0, 100_404, 50_400]]


class _RecordingS3(BaseHTTPRequestHandler):
    """Answers every range GET from a fixed object (ETag "v1") and remembers each request's headers."""

    body = bytes(range(256)) * 4
    seen: ClassVar[list[dict[str, str]]] = []

    def do_GET(self) -> None:
        type(self).seen.append({k.lower(): v for k, v in self.headers.items()} | {"path": self.path})
        if self.headers.get("If-Match", '"v1"') != '"v1"':
            self.send_response(412)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        first, last = (int(n) for n in self.headers["Range"].removeprefix("bytes=").split("-"))
        data = self.body[first : last + 1]
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {first}-{first + len(data) - 1}/{len(self.body)}")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("ETag", '"v1"')
        self.send_header("Last-Modified", formatdate(usegmt=True))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def recording_s3(monkeypatch) -> Iterator[type[_RecordingS3]]:
    """A loopback S3 stand-in named by AWS_ENDPOINT_URL, with no credentials in the environment."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _RecordingS3)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    _RecordingS3.seen = []
    try:
        yield _RecordingS3
    finally:
        server.shutdown()
        server.server_close()


def _read(offset: int, length: int, version: str) -> bytes:
    async def read() -> bytes:
        return bytes(await release_fetch.Objects("s3://bucket/release").read(path, offset, length, version))

    path = "s3://bucket/release/2026-11-18.0/theme=places/type=place/part-0.parquet"
    return release_fetch.run_coroutine(read())


@pytest.mark.parametrize(
    "credentials",
    [{}, {"AWS_ACCESS_KEY_ID": "AKID"}, {"AWS_ACCESS_KEY_ID": "AKID", "AWS_SECRET_ACCESS_KEY": "secret"}],
    ids=["none", "a key without its secret", "a key and its secret"],
)
def test_object_reads_are_anonymous_unless_both_keys_are_set_as_duckdb_reads(recording_s3, monkeypatch, credentials):
    for name, value in credentials.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_SESSION_TOKEN", "token")

    assert _read(10, 20, '"v1"') == recording_s3.body[10:30]

    [request] = recording_s3.seen
    assert request["path"] == "/bucket/release/2026-11-18.0/theme%3Dplaces/type%3Dplace/part-0.parquet"
    assert request["range"] == "bytes=10-29" and request["if-match"] == '"v1"'
    if "AWS_SECRET_ACCESS_KEY" in credentials:
        assert request["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKID/")
        assert "/us-west-2/s3/aws4_request" in request["authorization"]
        assert request["x-amz-security-token"] == "token"
    else:
        assert "authorization" not in request and "x-amz-security-token" not in request


def test_a_read_of_another_version_is_a_stale_index(recording_s3):
    with pytest.raises(StaleIndex, match="changed or is gone"):
        _read(0, 10, '"v0"')


def test_the_index_folder_is_configured_or_beside_a_duckdb_store_or_in_the_cache(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    home = Path.home()
    assert index_folder(str(tmp_path / "indexes"), {}) == tmp_path / "indexes"
    assert index_folder(" ", {"NAKODO_DATABASE": "/srv/nakodo/store.duckdb"}) == Path("/srv/nakodo/overture_index")
    postgres = {"NAKODO_DATABASE": "postgresql://nakodo@db:5432/nakodo", "XDG_CACHE_HOME": "/var/cache/u"}
    assert index_folder("", postgres) == Path("/var/cache/u/nakodo_dagster/overture_index")
    # A relative XDG_CACHE_HOME is invalid (the XDG spec): the user's ~/.cache, never the working folder.
    assert index_folder(None, {"XDG_CACHE_HOME": "cache"}) == home / ".cache/nakodo_dagster/overture_index"


def test_only_files_of_old_parquet_mr_are_read_past_their_chunks():
    assert arrow_reads_past_chunks("parquet-mr version 1.2.8 (build 0123abc)")
    assert arrow_reads_past_chunks("parquet-mr version 1.2")
    assert arrow_reads_past_chunks("parquet-mr version unknown")
    assert not arrow_reads_past_chunks("parquet-mr version 1.2.9 (build 0123abc)")
    assert not arrow_reads_past_chunks("parquet-mr version 1.13.1 (build db4183109d5b734ec5930d870cdae161e408ddba)")
    assert not arrow_reads_past_chunks("parquet-cpp-arrow version 22.0.0")
    assert not arrow_reads_past_chunks(None)
