"""A release's row-group index: every file's footer read once, kept on disk, so a run fetches only what it needs.

The expensive part of reading Overture over HTTP is the Parquet footers (about 1.4 MB per file, 16 files), not
the places a run keeps. The index reads each footer once per release and stores, per row group: the file, the
row group's number and row count, its ``bbox`` statistics (xmin min, xmax max, ymin min, ymax max) and the byte
range of every column chunk; plus each file's footer itself, which pyarrow needs to decode a row group. It lives
in ``<folder>/<root-hash>/<release>.parquet`` (one index row group per release file, so a run loads only the
footers of the files it touches), written aside and renamed into place, and every run and process reuses it.

A run then picks the row groups whose statistics meet its box, coalesces the byte ranges of the columns it
needs, fetches them with parallel range requests and decodes them from memory: no footer crosses the network.

Remote releases are fetched with plain HTTP range GETs from a small thread pool (urllib3), not through DuckDB:
DuckDB cannot read a byte range, and pyarrow's S3 filesystem sends a HEAD per file first (a round trip per
file, refused where a bucket policy grants anonymous readers only s3:GetObject, as the loopback server does).
The endpoint, region and anonymous-unless-credentials rule are ``duck.s3_secret``'s, so DuckDB and this
client always agree; with credentials, requests are signed with AWS Signature Version 4.

Overture releases never change once published, but a folder can be rewritten under the same name: each file's
version (ETag, or size and modification time) is in the index, every range request is conditional on it, and a
changed or vanished file raises ``StaleIndex`` so that the caller rebuilds the index.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import os
import struct
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from pathlib import Path
from urllib.parse import quote, urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import urllib3

from nakodo_dagster.overture.duck import connect, is_s3, s3_secret
from nakodo_dagster.overture.releases import check_root, glob_files, missing_release, places_glob

DEFAULT_INDEX_DIR = Path("data") / "overture_index"
# Bumped whenever the index's columns change: an index of another version is rebuilt, never misread.
INDEX_VERSION = "1"
# Latency, not bandwidth, bounds a run over HTTP: enough connections that a block's requests go out in one round.
FETCH_WORKERS = 64
# Parquet footers are read from the end: 64 KiB gets small footers in one request, the length of large ones.
TAIL_BYTES = 64 * 1024
# Reading a hole between two needed ranges costs bytes, a request beyond one per connection costs a round trip:
# holes are read through, smallest first, until the requests fit the connections or they would add this share.
HOLE_BUDGET = 0.4
# A range this long is split across connections, so that one big read does not serialise on one connection.
MIN_PIECE_BYTES = 1024 * 1024
# Arrow's kMaxDictHeaderSize.
ARROW_CHUNK_PADDING = 100
_MAGIC = b"PAR1"
_BBOX_FIELDS = ("xmin", "xmax", "ymin", "ymax")
_INDEX_SCHEMA = pa.schema(
    [
        ("file", pa.string()),
        ("file_size", pa.int64()),
        ("file_version", pa.string()),
        ("row_group", pa.int32()),
        ("rows", pa.int64()),
        ("xmin", pa.float64()),
        ("xmax", pa.float64()),
        ("ymin", pa.float64()),
        ("ymax", pa.float64()),
        ("chunks", pa.list_(pa.struct([("column", pa.string()), ("offset", pa.int64()), ("length", pa.int64())]))),
        # The file's footer, on the row of its row group 0 only.
        ("footer", pa.binary()),
    ]
)


class StaleIndex(Exception):
    """A release file changed or vanished since the index was built: rebuild the index and read again."""


@dataclass
class FetchStats:
    """What a set of fetches cost: HTTP requests (None for a local folder) and bytes."""

    requests: int | None
    bytes: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, length: int) -> None:
        """Count one read of ``length`` bytes."""
        with self._lock:
            self.bytes += length
            if self.requests is not None:
                self.requests += 1


class _LocalFiles:
    """Files in a local folder; a file's version is its size and modification time."""

    def __init__(self) -> None:
        self.stats = FetchStats(requests=None)

    def tail(self, path: str, length: int) -> tuple[bytes, int, str]:
        with open(path, "rb") as file:
            status = os.fstat(file.fileno())
            start = max(0, status.st_size - length)
            data = os.pread(file.fileno(), status.st_size - start, start)
        self.stats.add(len(data))
        return data, status.st_size, f"{status.st_size}:{status.st_mtime_ns}"

    def read(self, path: str, offset: int, length: int, version: str) -> bytes:
        try:
            with open(path, "rb") as file:
                status = os.fstat(file.fileno())
                if f"{status.st_size}:{status.st_mtime_ns}" != version:
                    raise StaleIndex(f"{path} changed since the index was built")
                data = os.pread(file.fileno(), length, offset)
        except FileNotFoundError as exc:
            raise StaleIndex(f"{path} is gone since the index was built") from exc
        self.stats.add(len(data))
        return data


class _S3Objects:
    """Objects behind an S3 endpoint, read with range GETs; an object's version is its ETag."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        _, self.settings = s3_secret(environ)
        self.stats = FetchStats(requests=0)
        self.http = urllib3.PoolManager(
            maxsize=FETCH_WORKERS,
            timeout=urllib3.Timeout(connect=10, read=60),
            retries=urllib3.Retry(total=3, backoff_factor=0.2, status_forcelist=(500, 502, 503, 504)),
        )

    def url(self, path: str) -> str:
        """The HTTP URL of ``s3://bucket/key``: path style at a named endpoint, virtual-hosted at AWS."""
        bucket, _, key = path.removeprefix("s3://").partition("/")
        if "endpoint" in self.settings:
            scheme = "https" if self.settings["use_ssl"] else "http"
            return f"{scheme}://{self.settings['endpoint']}/{bucket}/{quote(key)}"
        return f"https://{bucket}.s3.{self.settings['region']}.amazonaws.com/{quote(key)}"

    def tail(self, path: str, length: int) -> tuple[bytes, int, str]:
        response = self._get(path, f"bytes=-{length}", {})
        if response.status not in (200, 206):
            raise OSError(f"reading {path}: HTTP {response.status} {response.data[:200]!r}")
        size = int(response.headers.get("Content-Range", f"/{len(response.data)}").rsplit("/", 1)[1])
        return response.data, size, response.headers.get("ETag", "")

    def read(self, path: str, offset: int, length: int, version: str) -> bytes:
        response = self._get(path, f"bytes={offset}-{offset + length - 1}", {"If-Match": version} if version else {})
        if response.status in (404, 412):
            raise StaleIndex(f"{path} changed or is gone since the index was built (HTTP {response.status})")
        if response.status != 206 or len(response.data) != length:
            raise OSError(f"reading {length} bytes at {offset} of {path}: HTTP {response.status}")
        return response.data

    def _get(self, path: str, byte_range: str, headers: dict[str, str]) -> urllib3.BaseHTTPResponse:
        url = self.url(path)
        headers = {"Range": byte_range, **headers}
        if "key_id" in self.settings:
            headers = sign_v4("GET", url, headers, self.settings, dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ"))
        response = self.http.request("GET", url, headers=headers, preload_content=True)
        self.stats.add(len(response.data))
        return response


def sign_v4(method: str, url: str, headers: dict[str, str], settings: Mapping[str, object], stamp: str) -> dict:
    """The headers of an S3 request signed with AWS Signature Version 4 (payload unsigned, as S3 allows for GETs)."""
    parts = urlsplit(url)
    signed = {k.lower(): v.strip() for k, v in headers.items()} | {
        "host": parts.netloc,
        "x-amz-date": stamp,
        "x-amz-content-sha256": "UNSIGNED-PAYLOAD",
    }
    if settings.get("session_token"):
        signed["x-amz-security-token"] = str(settings["session_token"])
    names = sorted(signed)
    canonical = "\n".join(
        [
            method,
            parts.path or "/",
            parts.query,
            "".join(f"{name}:{signed[name]}\n" for name in names),
            ";".join(names),
            "UNSIGNED-PAYLOAD",
        ]
    )
    scope = f"{stamp[:8]}/{settings['region']}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    key = f"AWS4{settings['secret']}".encode()
    for part in (stamp[:8], str(settings["region"]), "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return {k: v for k, v in signed.items() if k != "host"} | {
        "Authorization": f"AWS4-HMAC-SHA256 Credential={settings['key_id']}/{scope}, "
        f"SignedHeaders={';'.join(names)}, Signature={signature}"
    }


def open_files(root: str) -> _LocalFiles | _S3Objects:
    """The way to read a root's files by byte range: local reads, or range GETs as the environment says."""
    return _S3Objects(os.environ) if is_s3(root) else _LocalFiles()


@dataclass(frozen=True)
class ReleaseIndex:
    """A release's row groups (file, number, rows, bbox statistics); chunks and footers are read per file on demand."""

    path: Path
    row_groups: pa.Table
    files: tuple[str, ...]
    sizes: tuple[int, ...]
    versions: tuple[str, ...]

    @cached_property
    def _stored(self) -> pq.ParquetFile:
        return pq.ParquetFile(self.path)

    def footer(self, file_number: int) -> pq.FileMetaData:
        """The footer of the release's ``file_number``-th file (files sorted by path); safe to call from threads."""
        # A reader of its own, not the shared one: footers are read from the fetch pool's threads at once.
        table = pq.ParquetFile(self.path).read_row_group(file_number, columns=["footer"])
        return pq.read_metadata(pa.BufferReader(table.column("footer")[0].as_buffer()))

    def intersecting(self, south: float, north: float, longitudes: Iterable[tuple[float, float]]) -> np.ndarray:
        """The index rows of the row groups whose bbox statistics meet the box; missing statistics always do."""
        column = {name: self.row_groups.column(name).to_numpy(zero_copy_only=False) for name in _BBOX_FIELDS}
        # NaN (no statistics) compares false: a row group is dropped only when it is provably outside.
        keep = ~((column["ymax"] < south) | (column["ymin"] > north))
        across = np.zeros(len(keep), dtype=bool)
        for west, east in longitudes:
            across |= ~((column["xmax"] < west) | (column["xmin"] > east))
        return np.flatnonzero(keep & across)

    def groups(self, rows: np.ndarray) -> dict[int, list[int]]:
        """The given index rows as file number -> row group numbers, in file order."""
        numbers = self.row_groups.column("file_number").to_numpy()[rows]
        row_groups = self.row_groups.column("row_group").to_numpy()[rows]
        groups: dict[int, list[int]] = {}
        for file_number, row_group in sorted(zip(numbers.tolist(), row_groups.tolist(), strict=True)):
            groups.setdefault(file_number, []).append(row_group)
        return groups

    def chunks(self, rows: np.ndarray, columns: Callable[[str], bool]) -> list[tuple[int, int, int, int]]:
        """(file number, row group, offset, length) of the wanted column chunks of the given index rows."""
        found = []
        for file_number, row_groups in self.groups(rows).items():
            # One index row group per release file: only the touched files' chunk lists are decoded.
            chunk_lists = self._stored.read_row_group(file_number, columns=["chunks"]).column("chunks").combine_chunks()
            wanted_lists = chunk_lists.take(pa.array(row_groups))
            chunks = pc.list_flatten(wanted_lists)
            names = chunks.field("column")
            leaves = pc.unique(names).to_pylist()
            keep = pc.is_in(names, value_set=pa.array([leaf for leaf in leaves if columns(leaf)], pa.string()))
            owners = np.asarray(row_groups)[pc.list_parent_indices(wanted_lists).to_numpy()]
            keep_mask = keep.to_numpy(zero_copy_only=False)
            offsets = chunks.field("offset").to_numpy()[keep_mask]
            lengths = chunks.field("length").to_numpy()[keep_mask]
            found += [
                (file_number, row_group, offset, length)
                for row_group, offset, length in zip(
                    owners[keep_mask].tolist(), offsets.tolist(), lengths.tolist(), strict=True
                )
            ]
        return found


def index_path(root: str | Path, release: str, folder: str | Path = DEFAULT_INDEX_DIR) -> Path:
    """Where a release's index lives: one folder per root (and S3 endpoint), one file per release."""
    root = check_root(root)
    endpoint = s3_secret(os.environ)[1].get("endpoint", "") if is_s3(root) else ""
    digest = hashlib.sha256(f"{endpoint}|{root}".encode()).hexdigest()[:16]
    return Path(folder) / digest / f"{release}.parquet"


def load_index(path: Path) -> ReleaseIndex | None:
    """The index stored at ``path``, or None if there is none or it is of another version."""
    try:
        file = pq.ParquetFile(path)
    except FileNotFoundError:
        return None
    if (file.schema_arrow.metadata or {}).get(b"nakodo_index_version") != INDEX_VERSION.encode():
        return None
    row_groups = file.read(columns=[name for name in _INDEX_SCHEMA.names if name not in ("chunks", "footer")])
    # Row group 0 of each file, in file order: one index row group per file.
    firsts = row_groups.filter(pc.equal(row_groups.column("row_group"), 0))
    sizes = [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)]
    file_numbers = np.repeat(np.arange(len(sizes)), sizes)
    return ReleaseIndex(
        path,
        row_groups.append_column("file_number", pa.array(file_numbers)),
        tuple(firsts.column("file").to_pylist()),
        tuple(firsts.column("file_size").to_pylist()),
        tuple(firsts.column("file_version").to_pylist()),
    )


def build_index(
    root: str | Path, release: str, folder: str | Path = DEFAULT_INDEX_DIR
) -> tuple[ReleaseIndex, FetchStats]:
    """Read every footer of the release once, store the index atomically, and return it with what it cost."""
    root = check_root(root)
    with connect(root) as connection:
        files = glob_files(connection, places_glob(root, release))
    if not files:
        raise missing_release(root, release)
    source = open_files(root)
    with ThreadPoolExecutor(FETCH_WORKERS) as pool:
        tables = list(pool.map(lambda path: _file_rows(source, path), files))
    path = index_path(root, release, folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    schema = _INDEX_SCHEMA.with_metadata({"nakodo_index_version": INDEX_VERSION, "root": root, "release": release})
    # Written aside and renamed: a reader in another process sees the old index or the new one, never half.
    handle, temporary = tempfile.mkstemp(prefix=f".{release}.", suffix=".parquet", dir=path.parent)
    os.close(handle)
    try:
        with pq.ParquetWriter(temporary, schema, compression="zstd") as writer:
            for table in tables:
                writer.write_table(table.cast(schema), row_group_size=max(1, table.num_rows))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    index = load_index(path)
    assert index is not None
    return index, source.stats


def _file_rows(source: _LocalFiles | _S3Objects, path: str) -> pa.Table:
    """One release file's index rows, read from its footer."""
    tail, size, version = source.tail(path, TAIL_BYTES)
    if tail[-4:] != _MAGIC:
        raise OSError(f"{path} is not a Parquet file")
    (length,) = struct.unpack("<I", tail[-8:-4])
    if length + 8 > len(tail):
        tail = source.read(path, size - length - 8, length + 8 - len(tail), version) + tail
    footer = _MAGIC + tail[-length - 8 :]
    metadata = pq.read_metadata(pa.BufferReader(footer))
    leaves = {metadata.schema.column(i).path: i for i in range(metadata.num_columns)}
    rows: dict[str, list] = {name: [] for name in _INDEX_SCHEMA.names}
    for number in range(metadata.num_row_groups):
        group = metadata.row_group(number)
        bounds = []
        for name, use_max in zip(_BBOX_FIELDS, (False, True, False, True), strict=True):
            column = leaves.get(f"bbox.{name}")
            stats = group.column(column).statistics if column is not None else None
            bounds.append(
                float(stats.max if use_max else stats.min) if stats is not None and stats.has_min_max else None
            )
        chunks = []
        for i in range(group.num_columns):
            chunk = group.column(i)
            start = chunk.data_page_offset
            # As Arrow computes a chunk's range: the dictionary page, when there is one, comes first.
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            chunks.append({"column": chunk.path_in_schema, "offset": start, "length": chunk.total_compressed_size})
        values = (path, size, version, number, group.num_rows, *bounds, chunks, footer if number == 0 else None)
        for name, value in zip(_INDEX_SCHEMA.names, values, strict=True):
            rows[name].append(value)
    return pa.table(rows, schema=_INDEX_SCHEMA)


def plan_requests(chunks: Sequence[tuple[int, int, int, int]]) -> list[tuple[int, int, int]]:
    """The (file number, offset, length) requests that fetch the chunks: as few holes read through as bring the
    requests down to the connections (within HOLE_BUDGET), long ranges split so that they share the connections."""
    ranges: list[list[int]] = []
    for file_number, _, offset, length in sorted(chunks, key=lambda c: (c[0], c[2])):
        last = ranges[-1] if ranges else None
        if last and last[0] == file_number and offset <= last[2]:
            last[2] = max(last[2], offset + length)
        else:
            ranges.append([file_number, offset, offset + length])
    needed = sum(end - start for _, start, end in ranges)
    holes = sorted(
        (ranges[i + 1][1] - ranges[i][2], i) for i in range(len(ranges) - 1) if ranges[i][0] == ranges[i + 1][0]
    )
    budget = HOLE_BUDGET * needed
    merge_into_previous = set()
    for hole, i in holes:
        if hole > budget or len(ranges) - len(merge_into_previous) <= FETCH_WORKERS:
            break
        budget -= hole
        merge_into_previous.add(i + 1)
    merged: list[list[int]] = []
    for i, current in enumerate(ranges):
        if i in merge_into_previous:
            merged[-1][2] = current[2]
        else:
            merged.append(list(current))
    total = sum(end - start for _, start, end in merged)
    piece = max(MIN_PIECE_BYTES, -(-total // FETCH_WORKERS))
    requests = []
    for file_number, start, end in merged:
        count = max(1, (end - start) // piece)
        edges = np.linspace(start, end, count + 1).astype(np.int64)
        requests += [(file_number, int(a), int(b - a)) for a, b in pairwise(edges)]
    return requests


def fetch_plan(index: ReleaseIndex, rows: np.ndarray, columns: Callable[[str], bool]) -> list[tuple[int, int, int]]:
    """The (file number, offset, length) range requests that fetch the wanted columns of these index rows."""
    # Arrow reads up to ARROW_CHUNK_PADDING past a column chunk of a file from parquet-mr before 1.2.9
    # (PARQUET-816), whose lengths understate the dictionary page: fetching it always, every byte Arrow reads is
    # a fetched byte.
    padded = [
        (file_number, group, offset, min(length + ARROW_CHUNK_PADDING, index.sizes[file_number] - offset))
        for file_number, group, offset, length in index.chunks(rows, columns)
    ]
    return plan_requests(padded)


def read_row_groups(
    root: str, index: ReleaseIndex, rows: np.ndarray, columns: Callable[[str], bool]
) -> tuple[pa.Table, FetchStats]:
    """The wanted columns of the given index rows' row groups, fetched by parallel range requests and decoded."""
    source = open_files(root)
    requests = fetch_plan(index, rows, columns)
    groups = index.groups(rows)
    # Each file is decoded from one buffer of its full size: only the fetched pages are ever touched (the rest is
    # never committed), and Arrow reads it natively instead of through a Python file object.
    buffers: dict[int, np.ndarray] = {}
    waiting = Counter(file_number for file_number, _, _ in requests)
    tables: dict[int, pa.Table] = {}

    def fetch(file_number: int, offset: int, length: int) -> bytes:
        return source.read(index.files[file_number], offset, length, index.versions[file_number])

    def decode(file_number: int, footer: pq.FileMetaData) -> pa.Table:
        buffer = buffers.get(file_number, np.zeros(0, dtype=np.uint8))
        reader = pq.ParquetFile(pa.BufferReader(pa.py_buffer(buffer)), metadata=footer)
        leaves = [footer.schema.column(i).path for i in range(footer.num_columns)]
        return reader.read_row_groups(groups.get(file_number, []), columns=[c for c in leaves if columns(c)])

    with ThreadPoolExecutor(FETCH_WORKERS) as pool:
        requested = {pool.submit(fetch, *request): request for request in requests}
        # Footers are parsed while the requests are out, not after they land (tens of milliseconds a file).
        footers = {f: pool.submit(index.footer, f) for f in groups}
        # A file is decoded as soon as its last piece lands, while the other files' requests are still out.
        for done in as_completed(requested):
            file_number, offset, length = requested[done]
            if file_number not in buffers:
                buffers[file_number] = np.zeros(index.sizes[file_number], dtype=np.uint8)
            buffers[file_number][offset : offset + length] = np.frombuffer(done.result(), dtype=np.uint8)
            waiting[file_number] -= 1
            if not waiting[file_number]:
                tables[file_number] = decode(file_number, footers[file_number].result())
    # No row group meets the box: file 0 still gives the columns' types, for an empty table.
    return pa.concat_tables([tables[f] for f in sorted(tables)] or [decode(0, index.footer(0))]), source.stats
