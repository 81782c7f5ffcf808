"""The byte ranges a read of row groups requests: arithmetic over column chunks' (file, row group, offset, length)
rows, no I/O.

Needed chunks are coalesced into ranges, the smallest holes between them read through, long ranges split across
the connections; and for each request, the row groups it carries bytes of, so that a row group is decoded as soon
as its last piece lands.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nakodo_dagster.overture.fetch import FETCH_WORKERS

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
