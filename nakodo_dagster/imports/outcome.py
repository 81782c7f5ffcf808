"""What a finished import run produced: the release it loaded, each reserved pair's report, what the read cost and
what the drift gate compared or held."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from nakodo_dagster.drift import PairDrift
from nakodo_dagster.overture.changelog import RunChanges
from nakodo_dagster.overture.reader import ReadResult, longitude_ranges
from nakodo_dagster.placement import CELL_DEGREES, ImportRun, parse_area_key
from nakodo_dagster.store.models import HeldImport


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


def pair_reports(run: ImportRun, table: pa.Table) -> list[PairReport]:
    """Each of the run's pairs as the reader returned it: its rows, and how many of them lie outside its area."""
    return [_pair_report(area, category, _rows_of(table, area, category)) for area, category in run.pairs]


def _rows_of(table: pa.Table, area: str, category: str) -> pa.Table:
    """The pair's businesses: a place Overture marks permanently closed is read, but is none."""
    in_pair = pc.and_(pc.equal(table["area"], area), pc.equal(table["category"], category))
    return table.filter(pc.and_(in_pair, pc.invert(pc.fill_null(table["closed"], False))))


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
