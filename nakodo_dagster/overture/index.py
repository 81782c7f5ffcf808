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

A run then picks the row groups whose statistics meet its box and the chunks of the columns it needs
(``reader.plan_read``, with ``read_chunks`` and ``read_footers``), coalesces their byte ranges (``ranges``), fetches
them with concurrent range requests and decodes them from memory (``fetch``): no footer crosses the network. The
index also holds each file's version, which every range request is conditional on.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import struct
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import obstore
import pyarrow as pa
import pyarrow.parquet as pq

from nakodo_dagster.overture.duck import connect, is_s3, s3_settings
from nakodo_dagster.overture.fetch import DECODE_WORKERS, FetchStats, Objects, StaleIndex, parse_footer, run_coroutine
from nakodo_dagster.overture.releases import check_root, glob_files, missing_release, places_glob

# Bumped whenever the index's columns change: an index of another version is rebuilt, never misread.
INDEX_VERSION = "3"
# The folder of release indexes' name, beside a DuckDB store or in the user's cache.
INDEX_FOLDER_NAME = "overture_index"
# Parquet footers are read from the end. Overture's run to about 1.4 MB (256 row groups of some fifty columns): a
# 2 MiB tail gets one in the first round trip, and a longer one takes a second.
TAIL_BYTES = 2 * 1024 * 1024
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


@dataclass(frozen=True)
class ReleaseIndex:
    """A release's row groups (file, number, rows, bbox statistics) and its files, as ``load_index`` loaded them.

    Plain data: each file's chunk ranges and footer stay in the stored index (``path``), and ``read_chunks`` and
    ``read_footers`` read them for the files a read touches, not every file's on every run.
    """

    path: Path
    row_groups: pa.Table
    # Each index row's file, as its number in ``files``.
    file_numbers: np.ndarray
    files: tuple[str, ...]
    sizes: tuple[int, ...]
    versions: tuple[str, ...]

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


def read_chunks(index: ReleaseIndex, rows: np.ndarray, columns: Callable[[str], bool]) -> np.ndarray:
    """The wanted column chunks of the given index rows: one row of (file number, row group, offset, length) each,
    as an int64 array (arrays, not tuples: a country's read wants some 12,000 of them)."""
    found = [np.empty((0, 4), dtype=np.int64)]
    stored = pq.ParquetFile(index.path)
    for file_number, row_groups in index.groups(rows).items():
        # One index row group per release file: only the touched files' chunk lists are decoded.
        lists = stored.read_row_group(file_number, columns=["chunks"]).column("chunks").combine_chunks()
        starts = lists.offsets.to_numpy()
        # Every row group of a file lists the same leaves in the same order (_file_rows): the wanted ones are
        # found once, by their place in the first list.
        leaves = lists.values.field("column").slice(0, int(starts[1] - starts[0])).to_pylist()
        wanted = np.flatnonzero([columns(leaf) for leaf in leaves])
        groups = np.asarray(row_groups, dtype=np.int64)
        positions = (starts[groups][:, None] + wanted[None, :]).ravel()
        offsets = lists.values.field("offset").to_numpy()[positions]
        if (offsets == _NOT_INDEXED).any():
            raise StaleIndex(f"{index.path} was built for other columns than {[leaves[i] for i in wanted]}")
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


def read_footers(index: ReleaseIndex, file_numbers: Iterable[int]) -> dict[int, pa.Buffer]:
    """The stored footers of the release's given files (by number, files sorted by path), as pyarrow reads them."""
    stored = pq.ParquetFile(index.path)
    return {
        number: stored.read_row_group(number, columns=["footer"]).column("footer")[0].as_buffer()
        for number in file_numbers
    }


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


def release_files(root: str, release: str) -> list[str]:
    """The places files of a release under a checked root, sorted; InvalidInput naming the releases there if it has
    none."""
    pattern = places_glob(root, release)
    places_folder, _, name = pattern.rpartition("/")
    try:
        # Not DuckDB's glob on S3: loading httpfs costs more than the listing's round trip.
        files = run_coroutine(Objects(root).files(places_folder, name.removeprefix("*"))) if is_s3(root) else []
    except (OSError, obstore.exceptions.BaseError):
        files = []
    if not files:
        # DuckDB's glob lists a local folder, and says why a bucket cannot be listed.
        with connect(root) as connection:
            files = glob_files(connection, pattern)
    if not files:
        raise missing_release(root, release)
    return files


def build_index(
    root: str | Path, release: str, folder: str | Path, columns: Callable[[str], bool] = lambda leaf: True
) -> tuple[ReleaseIndex, FetchStats]:
    """Read every footer of the release once, store the index atomically, and return it with what it cost.

    Only the chunks of the leaves ``columns`` wants (by Parquet path) get their byte ranges; a read that wants
    another one gets StaleIndex, and a rebuild with its own ``columns``.
    """
    root = check_root(root)
    files = release_files(root, release)
    source, tables = run_coroutine(_index_rows(root, files, columns))
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
) -> tuple[Objects, list[pa.Table]]:
    """Every file's index rows, footers fetched concurrently and decoded on threads as they land."""
    source = Objects(root)
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(DECODE_WORKERS) as pool:

        async def rows(path: str) -> pa.Table:
            footer, size, version = await file_footer(source, path)
            return await loop.run_in_executor(pool, _file_rows, path, footer, size, version, columns)

        return source, list(await asyncio.gather(*(rows(path) for path in files)))


async def file_footer(source: Objects, path: str) -> tuple[bytes, int, str]:
    """A file's footer (with the magic before it, as pyarrow reads it), its size and its version."""
    tail, size, version = await source.tail(path, TAIL_BYTES)
    if tail[-4:] != _MAGIC:
        raise OSError(f"{path} is cut short or not a Parquet file: it does not end with a Parquet footer")
    (length,) = struct.unpack("<I", tail[-8:-4])
    if length + 8 > len(tail):
        if length + 8 > size:
            raise OSError(f"{path} is cut short or not a Parquet file: its footer is longer than the file")
        tail = bytes(await source.read(path, size - length - 8, length + 8 - len(tail), version)) + tail
    return _MAGIC + tail[-length - 8 :], size, version


def _file_rows(path: str, footer: bytes, size: int, version: str, columns: Callable[[str], bool]) -> pa.Table:
    """One release file's index rows, read from its footer: every leaf listed, the wanted ones with their ranges."""
    metadata = parse_footer(footer)
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
