"""One import run end to end: read the run's box from a release, then replace exactly its reserved pairs."""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from nakodo_dagster.drift import DriftLimits, PairDrift
from nakodo_dagster.overture.changelog import RunChanges
from nakodo_dagster.overture.faults import read_with_retries
from nakodo_dagster.overture.reader import ReadResult, longitude_ranges
from nakodo_dagster.placement import CELL_DEGREES, ImportRun, narrowed, parse_area_key
from nakodo_dagster.resources.overture import OvertureResource
from nakodo_dagster.store import Store
from nakodo_dagster.store.models import HeldImport, WrittenImport


@dataclass(frozen=True)
class PairReport:
    """What one (area, category) pair got from an import, and the fact its check asserts."""

    area: str
    category: str
    rows: int
    outside_area: int


@dataclass(frozen=True)
class ImportOutcome:
    """A finished import: the release loaded, each reserved pair's report, and what the read cost."""

    run: ImportRun
    release: str
    pairs: list[PairReport]
    read: ReadResult | None
    """What the run read of the release; None when the changelog vouched for every pair and nothing was read."""
    seconds: float
    replaced_marks: dict[tuple[str, str], datetime]
    """Pairs whose mark on its way belonged to another import (that mark's stamp): this write replaced them."""
    compared: dict[tuple[str, str], PairDrift] = field(default_factory=dict)
    """Pairs the drift gate compared: read from a newer release than the places they held."""
    held: dict[tuple[str, str], HeldImport] = field(default_factory=dict)
    """Compared pairs whose new rows the gate held: they keep their places and release."""
    accepted: bool = False
    """An analyst's re-import: compared pairs landed whatever the gate's limits."""
    changes: RunChanges | None = None
    """What the release's changelog listed in the run's cells, when it has one."""
    carried: dict[tuple[str, str], int] = field(default_factory=dict)
    """Pairs moved to the release without reading it (the changelog listed no change in their cells): their
    places, as they stand."""


def execute_import(
    run: ImportRun,
    store: Store,
    overture: OvertureResource,
    release: str,
    stamp: datetime | None,
    gate: DriftLimits | None = None,
    accept: bool = False,
) -> ImportOutcome:
    """Move to the release, without reading it, the pairs its changelog vouches for (``carry_over_unchanged``);
    read the rest of the run's box (no store lock held meanwhile), then write those pairs in one short transaction,
    dated when it commits; ``stamp`` is the run's own marks' (None: it holds none). A transient fault of the read is
    tried again with backoff; ReadFailed says what failed for good. With ``gate``, pairs whose newer release moved
    past its limits are held (``Store.write_import``), unless ``accept``: then they are measured and land (and
    nothing is carried over: an analyst's re-import reads)."""
    started = time.perf_counter()
    changes, carried, to_read = (
        (None, WrittenImport({}, {}), run) if accept else carry_over_unchanged(run, store, overture, release, stamp)
    )
    read, written = None, WrittenImport({}, {})
    if to_read is not None:
        read = read_with_retries(lambda: overture.read(to_read, release))
        written = store.write_import(to_read, release, read.table, stamp=stamp, gate=gate, accept=accept)
    seconds = time.perf_counter() - started
    reports = pair_reports(to_read, read.table) if to_read is not None and read is not None else []
    reports += [PairReport(area, category, rows, 0) for (area, category), rows in carried.rows.items()]
    return ImportOutcome(
        run,
        release,
        sorted(reports, key=lambda report: (report.area, report.category)),
        read,
        seconds,
        carried.replaced_marks | written.replaced_marks,
        written.compared,
        written.held,
        accept,
        changes,
        carried.rows,
    )


def carry_over_unchanged(
    run: ImportRun, store: Store, overture: OvertureResource, release: str, stamp: datetime | None
) -> tuple[RunChanges | None, WrittenImport, ImportRun | None]:
    """What the release's changelog lists in the run's cells, the pairs moved to the release without reading it
    (in cells where it lists nothing added or changed, read from the release it compares with and holding none of
    the places it lists as removed: ``Store.carry_over``), and the run narrowed to the pairs left to read (None:
    none are). The changelog is read only for a run with pairs read from the release it compares with."""
    nothing = WrittenImport({}, {})
    base = overture.release_before(release)
    if base is None or not store.read_from(run.pairs, base):
        return None, nothing, run
    changes = overture.changes(run, release, base)
    untouched = [] if changes is None else [pair for pair in run.pairs if not changes.moved[pair[0]]]
    if not untouched:
        return changes, nothing, run
    removed = [place for places in changes.removed.values() for place in places]
    carried = store.carry_over(untouched, release, base, removed, stamp=stamp)
    return changes, carried, narrowed(run, [pair for pair in run.pairs if pair not in carried.rows])


def pair_reports(run: ImportRun, table: pa.Table) -> list[PairReport]:
    """Each of the run's pairs as the reader returned it: its rows, and how many of them lie outside its area."""
    return [_pair_report(area, category, _rows_of(table, area, category)) for area, category in run.pairs]


def _rows_of(table: pa.Table, area: str, category: str) -> pa.Table:
    return table.filter(pc.and_(pc.equal(table["area"], area), pc.equal(table["category"], category)))


def _pair_report(area: str, category: str, rows: pa.Table) -> PairReport:
    return PairReport(
        area=area, category=category, rows=rows.num_rows, outside_area=rows.num_rows - _inside_count(area, rows)
    )


def _inside_count(area_key: str, rows: pa.Table) -> int:
    area = parse_area_key(area_key)
    west, south, east, north = area.bbox
    lat, lng = rows["lat"], rows["lng"]
    if area.country_code is None:
        # The rule of cell_containing: half-open cells, latitude 90 in the last row, longitude 180 is -180.
        row = pc.multiply(pc.floor(pc.divide(lat, CELL_DEGREES)), CELL_DEGREES)
        row = pc.min_element_wise(row, 90 - CELL_DEGREES)
        column = pc.multiply(pc.floor(pc.divide(lng, CELL_DEGREES)), CELL_DEGREES)
        column = pc.if_else(pc.greater_equal(column, 180), pc.subtract(column, 360), column)
        inside = pc.and_(pc.equal(row, south), pc.equal(column, west))
    else:
        in_lat = pc.and_(pc.greater_equal(lat, south), pc.less_equal(lat, north))
        in_lng = functools.reduce(
            pc.or_,
            (
                pc.and_(pc.greater_equal(lng, low), pc.less_equal(lng, high))
                for low, high in longitude_ranges(west, east)
            ),
        )
        inside = pc.and_(pc.and_(in_lat, in_lng), pc.equal(rows["country"], area.country_code))
    return pc.sum(pc.cast(inside, pa.int64())).as_py() or 0
