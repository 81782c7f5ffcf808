"""A release's row-group index: every file's footer read once, kept on disk, so a run fetches only what it needs.

The expensive part of reading Overture over HTTP is the Parquet footers (about 1.4 MB per file, 16 files), not
the places a run keeps. The index reads each footer once per release and stores, per row group: the file, the
row group's number and row count, its ``bbox`` statistics (xmin min, xmax max, ymin min, ymax max) and its column
chunks, every one named and those the reader reads with their byte range as Arrow reads it; plus each file's footer
itself, which pyarrow needs to decode a row group. It lives in ``<folder>/<root-hash>/<release>.parquet`` (one
index row group per release file, so a run loads only the footers of the files it touches), written aside and
renamed into place, and every run and process reuses it.
The folder is ``OvertureResource.index`` (``NAKODO_OVERTURE_INDEX``); unset, ``index_folder`` puts it beside a
DuckDB store or in the user's cache, never under the working folder.

A run then picks the row groups whose statistics meet its box, coalesces the byte ranges of the columns it
needs, fetches them with concurrent range requests and decodes them from memory: no footer crosses the network.

Files are read through obstore (Rust's object_store): range GETs from one event loop, a local folder through
the same calls. Not through DuckDB: DuckDB cannot read a byte range; nor pyarrow's S3 filesystem, which sends a
HEAD per file first (a round trip per file, refused where a bucket policy grants anonymous readers only
s3:GetObject, as the loopback server does). The endpoint, region and anonymous-unless-credentials rule are
``duck.s3_settings``', the one DuckDB's secret is made from, so both clients always agree; with credentials,
obstore signs the requests, without them it sends them unsigned.

Overture releases never change once published, but a folder can be rewritten under the same name: each file's
version (its ETag; a local file's, obstore's: inode, modification time and size) is in the index, every range
request is conditional on it (If-Match), and a changed or vanished file raises ``StaleIndex`` so that the caller
rebuilds the index.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import hashlib
import os
import queue
import re
import struct
import tempfile
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import obstore
import pyarrow as pa
import pyarrow.parquet as pq
from obstore.exceptions import NotFoundError, PreconditionError
from obstore.store import LocalStore, S3Store

from nakodo_dagster.overture import duck
from nakodo_dagster.overture.duck import connect, is_s3, s3_settings
from nakodo_dagster.overture.releases import check_root, glob_files, missing_release, places_glob

# Bumped whenever the index's columns change: an index of another version is rebuilt, never misread.
INDEX_VERSION = "3"
# Latency, not bandwidth, bounds a run over HTTP: enough requests in flight at once (each on a connection of its
# own) that a block's requests go out in a round or two. S3 serves thousands of GETs a second per prefix.
FETCH_WORKERS = 128
# Footers are decoded and files' row groups decoded on threads while the requests are out.
DECODE_WORKERS = 4
# Row groups decoded at once as their pieces land: enough that a call's own cost is small beside the decoding.
DECODE_BATCH_ROW_GROUPS = 8
# The folder of release indexes' name, beside a DuckDB store or in the user's cache.
INDEX_FOLDER_NAME = "overture_index"
# Parquet footers are read from the end. Overture's run to about 1.4 MB (256 row groups of some fifty columns): a
# 2 MiB tail gets one in the first round trip, and a longer one takes a second.
TAIL_BYTES = 2 * 1024 * 1024
# Reading a hole between two needed ranges costs bytes; a request costs a round trip beyond one per connection, and
# CPU on both ends however many connections there are (0.4 ms of the reader's on the bench): holes are read through,
# smallest first, until they would add this share. Overture's needed columns sit between unneeded ones (geometry,
# sources, names' rules): a larger share reads those too, and a round trip of 40 ms costs less than the bytes do on
# any link slower than loopback.
HOLE_BUDGET = 0.08
# A range this long is split across connections, so that one big read does not serialise on one connection.
MIN_PIECE_BYTES = 1024 * 1024
# Offsets and row group numbers are keyed by their file's number in the bits above these (files up to 1 TiB).
_FILE_SHIFT = 40
_OFFSET_MASK = (1 << _FILE_SHIFT) - 1
# The range of a column chunk the index was not asked for.
_NOT_INDEXED = -1
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


T = TypeVar("T")


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


class _Objects:
    """A root's files read by byte range through obstore: a local folder, or an S3 bucket as the environment says.

    Every read is a coroutine of the caller's event loop; at most FETCH_WORKERS are in flight at once.
    """

    def __init__(self, root: str) -> None:
        if is_s3(root):
            bucket = root.removeprefix("s3://").partition("/")[0]
            self.prefix = f"s3://{bucket}/"
            self.store: S3Store | LocalStore = s3_store(bucket, os.environ)
        else:
            # Local paths are absolute (check_root): the store's root is the file system's.
            self.prefix = ""
            self.store = LocalStore()
        self.stats = FetchStats(requests=0 if self.prefix else None)
        self.slots = asyncio.Semaphore(FETCH_WORKERS)

    async def tail(self, path: str, length: int) -> tuple[bytes, int, str]:
        """The last ``length`` bytes of a file (all of a shorter one), its size and its version (ETag)."""
        async with self.slots:
            result = await obstore.get_async(
                self.store, path.removeprefix(self.prefix), options={"range": {"suffix": length}}
            )
            data = await result.bytes_async()
        self.stats.add(len(data))
        return bytes(data), result.meta["size"], result.meta["e_tag"] or ""

    async def files(self, folder: str, suffix: str) -> list[str]:
        """The files directly in a folder whose names end with ``suffix``, sorted, named as DuckDB's glob names them."""
        async with self.slots:
            listed = await obstore.list_with_delimiter_async(self.store, folder.removeprefix(self.prefix) + "/")
        self.stats.add(0)
        return sorted(self.prefix + item["path"] for item in listed["objects"] if item["path"].endswith(suffix))

    async def read(self, path: str, offset: int, length: int, version: str) -> memoryview:
        """``length`` bytes at ``offset`` of the file's ``version``; StaleIndex if the file changed or is gone.

        Conditional on the version (If-Match), each request on its own: a file rewritten between two of a run's
        requests fails the second one, so a run never decodes pages of two versions of a file. This is why the
        reads are single ``get`` calls with ``if_match`` and not ``get_ranges``, which takes no condition; the
        ranges are coalesced and split by ``plan_requests`` instead.
        """
        options: dict[str, Any] = {"range": (offset, offset + length)}
        if version:
            options["if_match"] = version
        try:
            async with self.slots:
                result = await obstore.get_async(self.store, path.removeprefix(self.prefix), options=options)
                data = memoryview(await result.bytes_async())
        except (FileNotFoundError, NotFoundError, PreconditionError) as exc:
            raise StaleIndex(f"{path} changed or is gone since the index was built: {exc}") from exc
        if len(data) != length:
            raise OSError(f"reading {length} bytes at {offset} of {path}: got {len(data)}")
        self.stats.add(len(data))
        return data


def s3_store(bucket: str, environ: Mapping[str, str]) -> S3Store:
    """An obstore client of ``bucket`` as ``duck.s3_settings`` describes S3 access, exactly as DuckDB's secret: the
    same endpoint (path-style), region, timeout and retries; signed with the credentials when there are some,
    unsigned (anonymous, as Overture's public bucket allows) when there are none.

    Everything the rule decides is passed explicitly, since obstore also reads AWS_* variables itself and an
    explicit value wins over them. The credentials come from a provider of this rule's: without one, obstore builds
    its own chain from the variables even when it does not sign (a lone AWS_ACCESS_KEY_ID is then an error, no key
    a lookup of the instance's metadata service), and a provider takes precedence over that chain.
    """
    settings = s3_settings(environ)
    signed = "key_id" in settings
    config: dict[str, Any] = {"region": settings["region"], "skip_signature": not signed}

    def credentials() -> dict[str, Any]:
        if not signed:
            raise PermissionError("S3 access is anonymous: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")
        keys = {"access_key_id": settings["key_id"], "secret_access_key": settings["secret"]}
        # Keys from the environment do not expire: obstore asks once.
        return keys | {"token": settings.get("session_token"), "expires_at": None}

    if "endpoint" in settings:
        scheme = "https" if settings["use_ssl"] else "http"
        config |= {"endpoint": f"{scheme}://{settings['endpoint']}", "virtual_hosted_style_request": False}
    else:
        config["virtual_hosted_style_request"] = True
    # duck's constants, read now (not at import) as connect() reads them: 5xx, dropped connections and timeouts are
    # retried with the same waits, and a request that hangs gives up after the same time.
    wait = dt.timedelta(milliseconds=duck.HTTP_RETRY_WAIT_MS)
    retries = {
        "max_retries": duck.HTTP_RETRIES,
        "backoff": {
            "init_backoff": wait,
            "base": duck.HTTP_RETRY_BACKOFF,
            "max_backoff": wait * duck.HTTP_RETRY_BACKOFF**duck.HTTP_RETRIES,
        },
        "retry_timeout": dt.timedelta(seconds=duck.HTTP_TIMEOUT_S * (duck.HTTP_RETRIES + 1)),
    }
    client = {
        "allow_http": not settings.get("use_ssl", True),
        "connect_timeout": dt.timedelta(seconds=min(10, duck.HTTP_TIMEOUT_S)),
        # Between two reads of a response, not for the whole of it: a long range on a slow link is not cut off.
        "read_timeout": dt.timedelta(seconds=duck.HTTP_TIMEOUT_S),
        "timeout": dt.timedelta(minutes=10),
    }
    return S3Store(bucket, config=config, client_options=client, retry_config=retries, credential_provider=credentials)


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to the end from synchronous code, on a thread of its own if this one runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        loop_running = False
    else:
        loop_running = True
    # Run outside the except clause: there, a failure of the coroutine would carry "no running event loop" as its
    # context, an unrelated error in the run's log.
    if not loop_running:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


@dataclass(frozen=True)
class ReleaseIndex:
    """A release's row groups (file, number, rows, bbox statistics); chunks and footers are read per file on demand."""

    path: Path
    row_groups: pa.Table
    # Each index row's file, as its number in ``files``.
    file_numbers: np.ndarray
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
        numbers = self.file_numbers[rows]
        row_groups = self.row_groups.column("row_group").to_numpy()[rows]
        groups: dict[int, list[int]] = {}
        for file_number, row_group in sorted(zip(numbers.tolist(), row_groups.tolist(), strict=True)):
            groups.setdefault(file_number, []).append(row_group)
        return groups

    def chunks(self, rows: np.ndarray, columns: Callable[[str], bool]) -> np.ndarray:
        """The wanted column chunks of the given index rows: one row of (file number, row group, offset, length)
        each, as an int64 array (arrays, not tuples: a country's read wants some 12,000 of them)."""
        found = [np.empty((0, 4), dtype=np.int64)]
        for file_number, row_groups in self.groups(rows).items():
            # One index row group per release file: only the touched files' chunk lists are decoded.
            lists = self._stored.read_row_group(file_number, columns=["chunks"]).column("chunks").combine_chunks()
            starts = lists.offsets.to_numpy()
            # Every row group of a file lists the same leaves in the same order (_file_rows): the wanted ones are
            # found once, by their place in the first list.
            leaves = lists.values.field("column").slice(0, int(starts[1] - starts[0])).to_pylist()
            wanted = np.flatnonzero([columns(leaf) for leaf in leaves])
            groups = np.asarray(row_groups, dtype=np.int64)
            positions = (starts[groups][:, None] + wanted[None, :]).ravel()
            offsets = lists.values.field("offset").to_numpy()[positions]
            if (offsets == _NOT_INDEXED).any():
                raise StaleIndex(f"{self.path} was built for other columns than {[leaves[i] for i in wanted]}")
            found.append(
                np.column_stack(
                    [
                        np.full(len(positions), file_number, dtype=np.int64),
                        np.repeat(groups, len(wanted)),
                        offsets,
                        lists.values.field("length").to_numpy()[positions],
                    ]
                )
            )
        return np.concatenate(found)


def index_folder(configured: str | Path | None, environ: Mapping[str, str]) -> Path:
    """The folder of release indexes: the configured one (``NAKODO_OVERTURE_INDEX``); unset or empty, the folder
    beside a DuckDB store (``NAKODO_DATABASE``), else the user's cache (``XDG_CACHE_HOME``, or ~/.cache).

    Never the working folder: every process of a deployment (the CLI, each run's pod) finds the same index.
    """
    if configured is not None and str(configured).strip():
        return Path(str(configured).strip()).expanduser().absolute()
    database = environ.get("NAKODO_DATABASE", "").strip()
    # As open_store tells them apart: a URL (postgresql://) or :memory: is not a file to sit beside.
    if database and "://" not in database and not database.startswith(":memory:"):
        return Path(database).expanduser().absolute().parent / INDEX_FOLDER_NAME
    cache = environ.get("XDG_CACHE_HOME", "").strip()
    # The XDG spec: a relative path in the variable is invalid and ignored.
    base = Path(cache) if cache and Path(cache).is_absolute() else Path.home() / ".cache"
    return base / "nakodo_dagster" / INDEX_FOLDER_NAME


def index_path(root: str | Path, release: str, folder: str | Path) -> Path:
    """Where a release's index lives: one folder per root (and S3 endpoint), one file per release."""
    root = check_root(root)
    endpoint = s3_settings(os.environ).get("endpoint", "") if is_s3(root) else ""
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
    sizes = [file.metadata.row_group(i).num_rows for i in range(file.num_row_groups)]
    # Row group 0 of each file, in file order: one index row group per file.
    firsts = np.cumsum([0, *sizes[:-1]]).tolist()

    def per_file(name: str) -> tuple:
        values = row_groups.column(name).to_pylist()
        return tuple(values[first] for first in firsts)

    return ReleaseIndex(
        path,
        row_groups,
        np.repeat(np.arange(len(sizes)), sizes),
        per_file("file"),
        per_file("file_size"),
        per_file("file_version"),
    )


def build_index(
    root: str | Path, release: str, folder: str | Path, columns: Callable[[str], bool] = lambda leaf: True
) -> tuple[ReleaseIndex, FetchStats]:
    """Read every footer of the release once, store the index atomically, and return it with what it cost.

    Only the chunks of the leaves ``columns`` wants (by Parquet path) get their byte ranges; a read that wants
    another one gets StaleIndex, and a rebuild with its own ``columns``.
    """
    root = check_root(root)
    pattern = places_glob(root, release)
    places_folder, _, name = pattern.rpartition("/")
    try:
        # Not DuckDB's glob on S3: loading httpfs costs more than the listing's round trip.
        files = _run(_Objects(root).files(places_folder, name.removeprefix("*"))) if is_s3(root) else []
    except (OSError, obstore.exceptions.BaseError):
        files = []
    if not files:
        # DuckDB's glob lists a local folder, and says why a bucket cannot be listed.
        with connect(root) as connection:
            files = glob_files(connection, pattern)
    if not files:
        raise missing_release(root, release)
    source, tables = _run(_index_rows(root, files, columns))
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


async def _index_rows(
    root: str, files: Sequence[str], columns: Callable[[str], bool]
) -> tuple[_Objects, list[pa.Table]]:
    """Every file's index rows, footers fetched concurrently and decoded on threads as they land."""
    source = _Objects(root)
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(DECODE_WORKERS) as pool:

        async def rows(path: str) -> pa.Table:
            footer, size, version = await _footer(source, path)
            return await loop.run_in_executor(pool, _file_rows, path, footer, size, version, columns)

        return source, list(await asyncio.gather(*(rows(path) for path in files)))


async def _footer(source: _Objects, path: str) -> tuple[bytes, int, str]:
    """A file's footer (with the magic before it, as pyarrow reads it), its size and its version."""
    tail, size, version = await source.tail(path, TAIL_BYTES)
    if tail[-4:] != _MAGIC:
        raise OSError(f"{path} is not a Parquet file")
    (length,) = struct.unpack("<I", tail[-8:-4])
    if length + 8 > len(tail):
        if length + 8 > size:
            raise OSError(f"{path} is not a Parquet file: its footer is longer than the file")
        tail = bytes(await source.read(path, size - length - 8, length + 8 - len(tail), version)) + tail
    return _MAGIC + tail[-length - 8 :], size, version


def _file_rows(path: str, footer: bytes, size: int, version: str, columns: Callable[[str], bool]) -> pa.Table:
    """One release file's index rows, read from its footer: every leaf listed, the wanted ones with their ranges."""
    metadata = pq.read_metadata(pa.BufferReader(footer))
    leaves = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    bbox_columns = [leaves.index(f"bbox.{name}") if f"bbox.{name}" in leaves else None for name in _BBOX_FIELDS]
    wanted = [i for i, leaf in enumerate(leaves) if columns(leaf)]
    groups = metadata.num_row_groups
    # Every row group has every column, in the schema's order: the chunks' names repeat, only their ranges are read,
    # and only the wanted ones' (the metadata objects of a file's 12,000 chunks take 30 ms, the build's most).
    offsets = np.full((groups, len(leaves)), _NOT_INDEXED, dtype=np.int64)
    lengths = np.full((groups, len(leaves)), _NOT_INDEXED, dtype=np.int64)
    bounds: list[list[float | None]] = [[] for _ in _BBOX_FIELDS]
    for number in range(groups):
        group = metadata.row_group(number)
        for i in wanted:
            chunk = group.column(i)
            start = chunk.data_page_offset
            # As Arrow computes a chunk's range: the dictionary page, when there is one, comes first.
            if chunk.has_dictionary_page and 0 < chunk.dictionary_page_offset < start:
                start = chunk.dictionary_page_offset
            offsets[number, i] = start
            lengths[number, i] = chunk.total_compressed_size
        if arrow_reads_past_chunks(metadata.created_by):
            # Every byte Arrow reads of the chunk is a byte fetched.
            lengths[number, wanted] = np.minimum(
                lengths[number, wanted] + ARROW_CHUNK_PADDING, size - offsets[number, wanted]
            )
        for values, column, use_max in zip(bounds, bbox_columns, (False, True, False, True), strict=True):
            stats = group.column(column).statistics if column is not None else None
            values.append(
                float(stats.max if use_max else stats.min) if stats is not None and stats.has_min_max else None
            )
    chunk_fields = _INDEX_SCHEMA.field("chunks").type.value_type
    chunks = pa.ListArray.from_arrays(
        pa.array(np.arange(groups + 1, dtype=np.int32) * len(leaves)),
        pa.StructArray.from_arrays(
            [pa.array(leaves * groups, pa.string()), pa.array(offsets.ravel()), pa.array(lengths.ravel())],
            fields=list(chunk_fields),
        ),
    )
    columns = {
        "file": [path] * groups,
        "file_size": [size] * groups,
        "file_version": [version] * groups,
        "row_group": np.arange(groups, dtype=np.int32),
        "rows": [metadata.row_group(number).num_rows for number in range(groups)],
        **dict(zip(_BBOX_FIELDS, bounds, strict=True)),
        "chunks": chunks,
        "footer": [footer if number == 0 else None for number in range(groups)],
    }
    return pa.table(columns, schema=_INDEX_SCHEMA)


def arrow_reads_past_chunks(created_by: str | None) -> bool:
    """Whether Arrow reads ARROW_CHUNK_PADDING past each column chunk of a file its writer says it wrote: parquet-mr
    before 1.2.9 understated the dictionary page in a chunk's length (PARQUET-816). Arrow's own rule: the
    application must be parquet-mr, and a version it cannot read counts as 0.0.0."""
    application, _, version = (created_by or "").partition(" version ")
    if application != "parquet-mr":
        return False
    numbers = re.match(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    return (tuple(int(n or 0) for n in numbers.groups()) if numbers else (0, 0, 0)) < (1, 2, 9)


def plan_requests(chunks: np.ndarray | Sequence[tuple[int, int, int, int]]) -> np.ndarray:
    """The (file number, offset, length) requests that fetch the chunks, one row each: the smallest holes read
    through, as many as HOLE_BUDGET allows, and long ranges split so that they share the connections."""
    chunks = np.asarray(chunks, dtype=np.int64).reshape(-1, 4)
    if not len(chunks):
        return np.empty((0, 3), dtype=np.int64)
    files, offsets, lengths = chunks[:, 0], chunks[:, 2], chunks[:, 3]
    order = np.lexsort((offsets, files))
    # Positions keyed by file, so that a range never runs on into the next file.
    starts = _keyed(files[order], offsets[order])
    ends = starts + lengths[order]
    # Chunks that touch or overlap make one range: a range ends where the next chunk starts past all before it.
    reach = np.maximum.accumulate(ends)
    first = np.flatnonzero(np.concatenate([[True], starts[1:] > reach[:-1]]))
    range_starts, range_ends = starts[first], np.maximum.reduceat(ends, first)
    needed = int((range_ends - range_starts).sum())
    holes = range_starts[1:] - range_ends[:-1]
    same_file = (range_starts[1:] >> _FILE_SHIFT) == (range_ends[:-1] >> _FILE_SHIFT)
    # Smallest holes first, while they fit the budget.
    candidates = np.flatnonzero(same_file)
    candidates = candidates[np.argsort(holes[candidates], kind="stable")]
    affordable = int(np.searchsorted(np.cumsum(holes[candidates]), HOLE_BUDGET * needed, side="right"))
    read_through = candidates[:affordable]
    kept = np.ones(len(range_starts), dtype=bool)
    kept[read_through + 1] = False
    merged_starts = range_starts[kept]
    merged_ends = np.maximum.reduceat(range_ends, np.flatnonzero(kept))
    spans = merged_ends - merged_starts
    piece = max(MIN_PIECE_BYTES, -(-int(spans.sum()) // FETCH_WORKERS))
    pieces = np.maximum(1, spans // piece)
    owner = np.repeat(np.arange(len(spans)), pieces)
    number = np.arange(len(owner)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    piece_starts = merged_starts[owner] + spans[owner] * number // pieces[owner]
    piece_ends = merged_starts[owner] + spans[owner] * (number + 1) // pieces[owner]
    return np.column_stack([piece_starts >> _FILE_SHIFT, piece_starts & _OFFSET_MASK, piece_ends - piece_starts])


class LandingRowGroups:
    """The wanted columns of some row groups, decoded table by table in the order they land, while later requests
    are still out; iterating raises the fetch's error where it failed. ``stats`` counts what was fetched."""

    def __init__(self, source: _Objects) -> None:
        self.stats = source.stats
        self._landed: queue.SimpleQueue[pa.Table | BaseException | None] = queue.SimpleQueue()

    def land(self, landed: pa.Table | BaseException | None) -> None:
        """Hand on a decoded table, the error that ended the fetch, or None once it is over."""
        self._landed.put(landed)

    def __iter__(self) -> Iterator[pa.Table]:
        while (landed := self._landed.get()) is not None:
            if isinstance(landed, BaseException):
                raise landed
            yield landed


@contextlib.contextmanager
def landing_row_groups(
    root: str, index: ReleaseIndex, rows: np.ndarray, columns: Callable[[str], bool]
) -> Iterator[LandingRowGroups]:
    """The given index rows' row groups, fetched by concurrent range requests on a thread of their own and decoded
    as they land (``LandingRowGroups``); leaving the block stops what is still being fetched."""
    source = _Objects(root)
    landing = LandingRowGroups(source)
    stop: list[Callable[[], None]] = []
    started = threading.Event()

    async def fetch_all() -> None:
        loop = asyncio.get_running_loop()
        fetching = asyncio.ensure_future(_read_row_groups(source, index, rows, columns, landing.land))
        stop.append(lambda: loop.call_soon_threadsafe(fetching.cancel))
        started.set()
        await fetching

    def serve() -> None:
        try:
            asyncio.run(fetch_all())
        # Whatever ends the fetch, the reader raises it where it iterates.
        except BaseException as error:
            landing.land(error)
        finally:
            started.set()
            landing.land(None)

    fetcher = threading.Thread(target=serve, name="row-group-fetch", daemon=True)
    fetcher.start()
    try:
        yield landing
    finally:
        started.wait()
        if stop and fetcher.is_alive():
            with contextlib.suppress(RuntimeError):  # the loop closed as the fetch ended
                stop[0]()
        fetcher.join()


def carried_row_groups(requests: np.ndarray, chunks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The row groups the requests carry bytes of: (file number, row group) rows, sorted by file and position, and
    for each request the first and past-the-last of them it meets (those whose wanted chunks' span it meets).

    A request inside a read-through hole of a row group's span counts too: a row group then waits for a request
    it did not need, never decodes before one it did.
    """
    chunks = np.asarray(chunks, dtype=np.int64).reshape(-1, 4)
    requests = np.asarray(requests, dtype=np.int64).reshape(-1, 3)
    if not len(chunks):
        nothing = np.zeros(len(requests), dtype=np.int64)
        return np.empty((0, 2), dtype=np.int64), nothing, nothing
    # Each row group's span, from its first wanted byte to its last; spans do not overlap, so sorted by start
    # they are sorted by end too, and the ones a request meets are a run of them.
    keys = _keyed(chunks[:, 0], chunks[:, 1])
    order = np.lexsort((chunks[:, 2], keys))
    keys, starts = keys[order], _keyed(chunks[order, 0], chunks[order, 2])
    first = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]]))
    span_starts = starts[first]
    span_ends = np.maximum.reduceat(starts + chunks[order, 3], first)
    by_position = np.argsort(span_starts, kind="stable")
    span_starts, span_ends = span_starts[by_position], span_ends[by_position]
    row_groups = np.column_stack([span_starts >> _FILE_SHIFT, keys[first][by_position] & _OFFSET_MASK])
    request_starts = _keyed(requests[:, 0], requests[:, 1])
    first_met = np.searchsorted(span_ends, request_starts, side="right")
    past_met = np.searchsorted(span_starts, request_starts + requests[:, 2], side="left")
    return row_groups, first_met, np.maximum(first_met, past_met)


def _keyed(file_numbers: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Values (offsets, row group numbers) keyed by their file: ordered by file first, then by value."""
    return (file_numbers << _FILE_SHIFT) | values


async def _read_row_groups(
    source: _Objects,
    index: ReleaseIndex,
    rows: np.ndarray,
    columns: Callable[[str], bool],
    landed: Callable[[pa.Table], None],
) -> None:
    chunks = index.chunks(rows, columns)
    requests = plan_requests(chunks)
    row_groups, first_met, past_met = carried_row_groups(requests, chunks)
    # How many requests each row group still waits for: each request adds one to a run of them.
    starts_and_ends = np.zeros(len(row_groups) + 1, dtype=np.int64)
    np.add.at(starts_and_ends, first_met, 1)
    np.add.at(starts_and_ends, past_met, -1)
    pending = np.cumsum(starts_and_ends[:-1])
    unready = Counter(row_groups[:, 0].tolist())
    ready: dict[int, list[int]] = {}
    # Each file is decoded from one buffer of its full size: only the fetched pages are ever touched (the rest is
    # never committed), and Arrow reads it natively instead of through a Python file object.
    buffers: dict[int, np.ndarray] = {}

    def decode(file_number: int, groups: list[int], footer: pq.FileMetaData) -> pa.Table:
        buffer = buffers.get(file_number, np.zeros(0, dtype=np.uint8))
        reader = pq.ParquetFile(pa.BufferReader(pa.py_buffer(buffer)), metadata=footer)
        leaves = [footer.schema.column(i).path for i in range(footer.num_columns)]
        try:
            return reader.read_row_groups(groups, columns=[c for c in leaves if columns(c)])
        except (OSError, pa.ArrowException) as exc:
            # Arrow decodes a buffer and does not know its file: a failure's headline must name it (faults.classify
            # reads the name from the chain; the cause still says what was wrong).
            raise OSError(f"{index.files[file_number]}: {exc}") from exc

    async def fetch(number: int, file_number: int, offset: int, length: int) -> tuple[int, int, int, memoryview]:
        data = await source.read(index.files[file_number], offset, length, index.versions[file_number])
        return number, file_number, offset, data

    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(DECODE_WORKERS) as pool:
        # Footers are parsed while the requests are out, not after they land (tens of milliseconds a file).
        footers = {f: loop.run_in_executor(pool, index.footer, f) for f in unready}

        async def decoded(file_number: int, groups: list[int]) -> None:
            landed(await loop.run_in_executor(pool, decode, file_number, groups, await footers[file_number]))

        decodes: list[asyncio.Future[None]] = []
        fetches = [asyncio.ensure_future(fetch(number, *request)) for number, request in enumerate(requests.tolist())]
        try:
            # Row groups are decoded in batches as their last pieces land, while later requests are still out.
            for done in asyncio.as_completed(fetches):
                number, file_number, offset, data = await done
                if file_number not in buffers:
                    buffers[file_number] = np.zeros(index.sizes[file_number], dtype=np.uint8)
                buffers[file_number][offset : offset + len(data)] = np.frombuffer(data, dtype=np.uint8)
                met = slice(first_met[number], past_met[number])
                pending[met] -= 1
                for landed_file, group in row_groups[met][pending[met] == 0].tolist():
                    ready.setdefault(landed_file, []).append(group)
                    unready[landed_file] -= 1
                batch = ready.get(file_number, [])
                if batch and (len(batch) >= DECODE_BATCH_ROW_GROUPS or not unready[file_number]):
                    groups = sorted(ready.pop(file_number))
                    decodes.append(asyncio.ensure_future(decoded(file_number, groups)))
            await asyncio.gather(*decodes)
            if not decodes:
                # No row group meets the box: file 0 still gives the columns' types, for an empty table.
                landed(decode(0, [], index.footer(0)))
        finally:
            for task in (*fetches, *decodes):
                task.cancel()
