"""One import run's read of an Overture places release: one DuckDB query over the run's box.

With a release index (``overture.index``, built on a release's first read and reused by every run and
process, in the folder ``index_dir`` names), only the row groups meeting the box and only the columns the
query uses are fetched: ``plan_read`` works out which byte ranges of which files (``overture.ranges`` coalesces
them), ``overture.fetch`` fetches them by concurrent range requests and decodes them, and the same query runs over
them in memory as they land.
Without one (``index_dir=None``), DuckDB reads the release's files itself, footers and all.

What a run keeps:

- Places inside the run's box, read through the ``bbox`` struct so that row-group statistics prune;
  a box with west > east crosses the antimeridian and is read as its two halves in the same query.
- For a block of cells, each place goes to the one cell containing it (``placement.cell_containing``,
  computed in SQL): a place on a cell edge belongs to the cell to its north and east, a place on the
  antimeridian to the cell at -180. For a country, places whose first address is in that country.
- Only the (area, category) pairs the run reserved: a block's box can span cells it was not asked for.
- Places Overture is sure enough exist: ``confidence >= MIN_CONFIDENCE`` (no confidence: left out), and
  not ``permanently_closed`` (a status releases before 2025-09 do not have).

Category matching, for a requested category C:

- current schema (``taxonomy``, 2026-09 on): C is the place's ``taxonomy.primary``, or C is in its
  ``taxonomy.hierarchy`` (so ``restaurant`` takes in ``italian_restaurant`` and ``pizza_restaurant``), or C
  is its ``basic_category``. ``taxonomy.alternates`` are not used.
- previous schema (``categories``): C is ``categories.primary``. ``categories.alternate`` is not used:
  alternates are weak, secondary guesses, and a campaign for pubs should not mail every restaurant that
  once served a pint.

A place matching several requested categories comes back once per category.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from nakodo_dagster.duckdb_connection import in_memory, interruptible
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.duck import connect, is_s3
from nakodo_dagster.overture.faults import ReleaseChanged, classify, read_with_retries
from nakodo_dagster.overture.fetch import (
    FetchStats,
    FileRead,
    Objects,
    ReadPlan,
    StaleIndex,
    landing_row_groups,
    run_coroutine,
)
from nakodo_dagster.overture.index import ReleaseIndex, build_index, index_path, load_index, read_chunks, read_footers
from nakodo_dagster.overture.ranges import carried_row_groups, plan_requests
from nakodo_dagster.overture.releases import check_root, glob_files, missing_release, places_glob
from nakodo_dagster.placement import CELL_DEGREES, ImportRun, parse_area_key

# Overture publishes no single cut-off (its own examples go as high as 0.95 for "certainly exists") and sets a
# closed place's confidence to 0. 0.5 keeps the places more likely to exist than not.
MIN_CONFIDENCE = 0.5

PLACES_SCHEMA = pa.schema(
    [
        ("id", pa.string()),
        ("name", pa.string()),
        ("category", pa.string()),
        ("lat", pa.float64()),
        ("lng", pa.float64()),
        ("confidence", pa.float64()),
        ("address", pa.string()),
        ("country", pa.string()),
        ("websites", pa.list_(pa.string())),
        ("phones", pa.list_(pa.string())),
        ("area", pa.string()),
    ]
)
"""The columns a read returns: one row per (place, matched category), ``area`` the key it is stored under."""

# What the query reads of a release: whole columns (None), or some fields of a struct or of a list of structs.
QUERY_COLUMNS: dict[str, frozenset[str] | None] = {
    "id": None,
    "bbox": None,
    "names": frozenset({"primary"}),
    "basic_category": None,
    "taxonomy": frozenset({"primary", "hierarchy"}),
    "categories": frozenset({"primary"}),
    "confidence": None,
    "websites": None,
    "phones": None,
    "addresses": frozenset({"freeform", "locality", "postcode", "country"}),
    "operating_status": None,
}

# The same rule as placement.cell_containing, as a cell's row and column numbers: rows clamped at the poles, columns
# wrapped at the antimeridian. Numbers, not keys: a block's places are joined with its pairs' cells without formatting
# a key per place, and each pair brings its own key.
_CELL_ROW = "CAST(least(greatest(floor(lat / $cell), $first_row), $last_row) AS INTEGER)"
_CELL_COLUMN = (
    "CAST(((floor(lng / $cell) + $half_columns) % $columns + $columns) % $columns - $half_columns AS INTEGER)"
)
# A read's rows are in (area, category, id) order, unique: one row per place and matched category. Sorted by Arrow
# after the query rather than by DuckDB in it, which carried every column of a block's rows through its sort at three
# times the cost; the query numbers the run's pairs in (area, category) order (pair_order), so that the sort compares
# a number and the id instead of three strings.
RESULT_ORDER = [("pair_order", "ascending"), ("id", "ascending")]
# The sorted result's columns are gathered on threads of their own: the sort runs after the last row group landed,
# when the read's other threads are done.
RESULT_THREADS = 2


@dataclass(frozen=True)
class ReadStats:
    """What a read cost: rows returned, wall time, the release's files, bytes read and (s3:// only) HTTP requests.

    With the index, bytes and requests are the range requests' and, on the read that built the index, the footers'.
    """

    rows: int
    seconds: float
    files: int
    bytes_read: int | None
    requests: int | None


@dataclass(frozen=True)
class ReadResult:
    """The places an import run keeps, in ``PLACES_SCHEMA``, what reading them cost, and the schema read."""

    table: pa.Table
    stats: ReadStats
    schema: str


def read_places(
    run: ImportRun, root: str | Path, release: str, *, index_dir: str | Path | None, began: datetime | None = None
) -> ReadResult:
    """The places of one import run from one release: the run's box, categories and (for a country) country.

    ``index_dir`` holds release indexes (built here on a release's first read; ``OvertureResource.index_dir``
    is the configured one); None reads without one. ``began`` is when the import began reading (None: now): a
    file written since then changed under its read (``ReleaseChanged``); a file written before and unreadable now
    was unreadable from its first read, and fails as unreadable.
    """
    began = began or datetime.now(UTC)
    started = time.perf_counter()
    if run.country_code and run.areas != (f"country:{run.country_code}",):
        raise InvalidInput(f"a country run reads one area, country:{run.country_code}; got {list(run.areas)}")
    if index_dir is None:
        table, schema, files, bytes_read, requests = _read_with_duckdb(run, root, release)
    else:
        table, schema, files, bytes_read, requests = _read_with_index(run, root, release, index_dir, began)
    stats = ReadStats(table.num_rows, time.perf_counter() - started, files, bytes_read, requests)
    return ReadResult(table, stats, schema)


def read_places_retried(
    run: ImportRun, root: str | Path, release: str, *, index_dir: str | Path | None, began: datetime | None = None
) -> ReadResult:
    """``read_places`` as an import run reads: a transient fault of the release (the object store throttling,
    resetting connections, stalling) is tried again here with a doubling pause; ReadFailed says what failed for
    good (``faults.read_with_retries``)."""
    began = began or datetime.now(UTC)
    return read_with_retries(lambda: read_places(run, root, release, index_dir=index_dir, began=began))


def _read_with_duckdb(run: ImportRun, root: str | Path, release: str) -> tuple[pa.Table, str, int, int, int | None]:
    pattern = places_glob(root, release)
    root = check_root(root)
    remote = is_s3(root)
    with connect(root) as connection:
        if remote:
            connection.execute("CALL enable_logging('HTTP')")
        files = glob_files(connection, pattern)
        if not files:
            raise missing_release(root, release)
        described = interruptible(
            connection, lambda: connection.execute("DESCRIBE SELECT * FROM read_parquet(?)", [files[0]]).fetchall()
        )
        columns = {row[0] for row in described}
        schema = _schema_flavour(columns, release)
        sql, parameters = _query(run, schema, columns, "read_parquet($files)")
        connection.execute("SET enable_profiling = 'no_output'")
        connection.execute("""SET custom_profiling_settings = '{"TOTAL_BYTES_READ": "true"}'""")
        table = _result(
            interruptible(connection, lambda: connection.execute(sql, parameters | {"files": files}).to_arrow_table())
        )
        bytes_read = json.loads(connection.get_profiling_information(format="json")).get("total_bytes_read")
        requests = (
            connection.execute("SELECT count(*) FROM duckdb_logs WHERE type = 'HTTP'").fetchone()[0] if remote else None
        )
    return table, schema, len(files), bytes_read, requests


def _read_with_index(
    run: ImportRun, root: str | Path, release: str, index_dir: str | Path, began: datetime
) -> tuple[pa.Table, str, int, int, int | None]:
    root = check_root(root)
    index = load_index(index_path(root, release, index_dir))
    spent = []
    if index is None:
        index, cost = build_index(root, release, index_dir, query_column)
        spent.append(cost)
    try:
        table, schema, cost = _query_landing(run, root, index, release)
    except StaleIndex as stale:
        # A file changed under the same release name (or the index was built for other columns): the index is
        # rebuilt once, and the read repeated on it.
        try:
            index, rebuilt = build_index(root, release, index_dir, query_column)
            table, schema, cost = _query_landing(run, root, index, release)
        except Exception as error:
            if classify(error).kind != "unreadable" or not _written_since(root, stale, began):
                raise
            # Written while this import read it: cut short or caught half replaced, it may be whole again on a
            # later try, unlike a file already unreadable when the import began (truncated before it, whatever an
            # older index says of it).
            raise ReleaseChanged(f"{stale}; read again: {error}") from error
        spent.append(rebuilt)
    spent.append(cost)
    requests = None if spent[0].requests is None else sum(s.requests for s in spent)
    return table, schema, len(index.files), sum(s.bytes for s in spent), requests


def _written_since(root: str, stale: StaleIndex, began: datetime) -> bool:
    """Whether the file a stale index blamed was written at or after ``began`` (a vanished one was)."""
    if stale.path is None:
        return False
    written = run_coroutine(Objects(root).modified(stale.path))
    return written is None or written >= began


def _result(table: pa.Table) -> pa.Table:
    order = pc.sort_indices(table, sort_keys=RESULT_ORDER)
    with ThreadPoolExecutor(RESULT_THREADS) as pool:
        columns = list(pool.map(lambda name: table.column(name).take(order), PLACES_SCHEMA.names))
    return pa.Table.from_arrays(columns, names=PLACES_SCHEMA.names).cast(PLACES_SCHEMA)


def _query_landing(run: ImportRun, root: str, index: ReleaseIndex, release: str) -> tuple[pa.Table, str, FetchStats]:
    """The run's query over the query's columns of the row groups that meet its box, run as they land."""
    west, south, east, north = run.bbox
    rows = index.intersecting(south, north, longitude_ranges(west, east))
    with landing_row_groups(root, plan_read(index, rows, query_column)) as landing:
        table, schema = query_tables(run, release, iter(landing))
    return table, schema, landing.stats


def plan_read(index: ReleaseIndex, rows: np.ndarray, columns: Callable[[str], bool]) -> ReadPlan:
    """What fetching the ``columns`` of the given index rows' row groups takes: the chunks' byte ranges coalesced
    into requests (``ranges``), the row groups each request carries, and the files' paths, versions and footers.
    StaleIndex if the index was built for other columns."""
    chunks = read_chunks(index, rows, columns)
    requests = plan_requests(chunks)
    row_groups, first_met, past_met = carried_row_groups(requests, chunks)
    # No row group meets the box: file 0 still gives the columns' types, for an empty table.
    numbers = sorted(set(row_groups[:, 0].tolist())) or [0]
    footers = read_footers(index, numbers)
    files = {n: FileRead(index.files[n], index.sizes[n], index.versions[n], footers[n]) for n in numbers}
    return ReadPlan(files, requests, row_groups, first_met, past_met, columns)


def query_tables(run: ImportRun, release: str, tables: Iterator[pa.Table]) -> tuple[pa.Table, str]:
    """The run's places in ``tables`` (at least one, all of one schema) and the release's schema flavour: DuckDB
    works through each table as it comes, while later ones may still be on their way (0.83 to 0.92 of the time of
    a query after the last landed, on the bench's dense reads). An error ``tables`` raises is raised as it is."""
    stopped: list[BaseException] = []

    def batches(first: pa.Table) -> Iterator[pa.RecordBatch]:
        # DuckDB pulls these on a thread of its own and would hand an error raised here on as one of its own, its
        # type lost (a StaleIndex would no longer rebuild the index): the stream ends there instead, and the error
        # is raised once DuckDB returns.
        try:
            for table in itertools.chain([first], tables):
                yield from table.to_batches()
        except BaseException as error:
            stopped.append(error)

    # Opened before the first row groups land, while the requests are out: a new in-memory database takes 10 to
    # 20 ms, a tenth of a small block's read.
    with in_memory() as connection:
        # Pushed into an Arrow stream, the box and confidence filters run in pyarrow, which copies every kept row's
        # nested columns before DuckDB converts them again. Filtered in DuckDB, where the query writes them, a
        # country's query alone costs 0.4 CPU seconds instead of 0.65, and its whole read 2.16 instead of 2.41.
        connection.execute("SET disabled_optimizers = 'filter_pushdown'")
        first = next(tables)
        columns = set(first.column_names)
        schema = _schema_flavour(columns, release)
        sql, parameters = _query(run, schema, columns, "places")
        connection.register("places", pa.RecordBatchReader.from_batches(first.schema, batches(first)))
        table = interruptible(connection, lambda: connection.execute(sql, parameters).to_arrow_table())
    if stopped:
        raise stopped[0]
    return _result(table), schema


def query_column(leaf: str) -> bool:
    """Whether the query reads a column chunk, named by its Parquet path (``addresses.list.element.country``)."""
    top, *rest = leaf.split(".")
    if top not in QUERY_COLUMNS:
        return False
    fields = QUERY_COLUMNS[top]
    # A struct's field sits right under it, a list of structs' under list.element: either way it is in the path.
    return fields is None or not fields.isdisjoint(rest)


def _schema_flavour(columns: set[str], release: str) -> str:
    if "taxonomy" in columns:
        return "current"
    if "categories" in columns:
        return "previous"
    raise InvalidInput(
        f"release {release!r} has neither taxonomy nor categories: not an Overture places release "
        f"(columns: {', '.join(sorted(columns))})"
    )


def _query(run: ImportRun, schema: str, columns: set[str], source: str) -> tuple[str, dict]:
    """The run's SQL over ``source`` and its parameters; its shape depends only on the schema and the kind of run."""
    has_basic_category = "basic_category" in columns
    has_status = "operating_status" in columns
    pair_order = {pair: number for number, pair in enumerate(sorted(run.pairs))}
    meets_box, parameters = box_predicate(run.bbox)
    parameters |= {
        "min_confidence": MIN_CONFIDENCE,
        "pair_areas": [area for area, _ in run.pairs],
        "pair_categories": [category for _, category in run.pairs],
        "pair_orders": [pair_order[pair] for pair in run.pairs],
    }
    predicates = [meets_box, "confidence >= $min_confidence"]
    if has_status:
        predicates.append("operating_status IS DISTINCT FROM 'permanently_closed'")
    if run.country_code:
        predicates.append("addresses[1].country = $country_code")
        parameters |= {"country_code": run.country_code, "country_area": run.areas[0]}
        located = "$country_area AS area"
        same_area = "l.area = p.area"
        pair_columns = ""
    else:
        cells = [parse_area_key(area) for area, _ in run.pairs]
        parameters |= {
            "cell": CELL_DEGREES,
            "first_row": round(-90 / CELL_DEGREES),
            "last_row": round(90 / CELL_DEGREES) - 1,
            "columns": round(360 / CELL_DEGREES),
            "half_columns": round(180 / CELL_DEGREES),
            # A cell's south-west corner: its row and column times CELL_DEGREES.
            "pair_rows": [round(area.bbox[1] / CELL_DEGREES) for area in cells],
            "pair_columns": [round(area.bbox[0] / CELL_DEGREES) for area in cells],
        }
        located = f"{_CELL_ROW} AS cell_row, {_CELL_COLUMN} AS cell_column"
        same_area = "l.cell_row = p.cell_row AND l.cell_column = p.cell_column"
        pair_columns = ", unnest($pair_rows::INTEGER[]) AS cell_row, unnest($pair_columns::INTEGER[]) AS cell_column"
    if schema == "current":
        category_columns = "taxonomy.primary AS taxonomy_primary, taxonomy.hierarchy AS hierarchy"
        match = "l.taxonomy_primary = p.category OR list_contains(l.hierarchy, p.category)"
        if has_basic_category:
            category_columns += ", basic_category"
            match += " OR l.basic_category = p.category"
    else:
        category_columns = "categories.primary AS categories_primary"
        match = "l.categories_primary = p.category"
    sql = f"""
        WITH candidates AS (
            SELECT
                id,
                names.primary AS name,
                (CAST(bbox.ymin AS DOUBLE) + CAST(bbox.ymax AS DOUBLE)) / 2 AS lat,
                (CAST(bbox.xmin AS DOUBLE) + CAST(bbox.xmax AS DOUBLE)) / 2 AS lng,
                confidence,
                addresses[1] AS first_address,
                websites,
                phones,
                {category_columns}
            FROM {source}
            WHERE {" AND ".join(predicates)}
        ),
        located AS (SELECT *, {located} FROM candidates),
        pairs AS (
            SELECT unnest($pair_areas) AS area, unnest($pair_categories) AS category,
                unnest($pair_orders::INTEGER[]) AS pair_order{pair_columns}
        )
        SELECT
            l.id,
            l.name,
            p.category,
            l.lat,
            l.lng,
            l.confidence,
            nullif(concat_ws(', ', l.first_address.freeform,
                nullif(concat_ws(' ', l.first_address.postcode, l.first_address.locality), '')), '') AS address,
            l.first_address.country AS country,
            l.websites,
            l.phones,
            p.area,
            p.pair_order
        FROM located AS l
        JOIN pairs AS p ON {same_area} AND ({match})
    """
    return sql, parameters


def box_predicate(bbox: tuple[float, float, float, float]) -> tuple[str, dict[str, object]]:
    """SQL that a row's ``bbox`` meets the box (west, south, east, north), and its parameters: one longitude range,
    or two across the antimeridian."""
    west, south, east, north = bbox
    ranges = longitude_ranges(west, east)
    parameters: dict[str, object] = {"south": south, "north": north}
    for i, (low, high) in enumerate(ranges):
        parameters |= {f"west{i}": low, f"east{i}": high}
    longitude = " OR ".join(f"(bbox.xmax >= $west{i} AND bbox.xmin <= $east{i})" for i in range(len(ranges)))
    return f"bbox.ymax >= $south AND bbox.ymin <= $north AND ({longitude})", parameters


def longitude_ranges(west: float, east: float) -> list[tuple[float, float]]:
    """The closed longitude ranges a box covers: two when it crosses the antimeridian (west > east)."""
    ranges = [(west, east)] if west <= east else [(west, 180.0), (-180.0, east)]
    # A place on the antimeridian itself (180) belongs to the cells at -180.
    if any(low <= -180.0 for low, _ in ranges):
        ranges.append((180.0, 180.0))
    return ranges
