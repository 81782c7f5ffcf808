"""Where a sensor tick's time goes on the DuckDB store, for each way of visiting the file: opened for each
transaction or held for the whole tick (``Store.held``), checkpointed when it closes or not (``PRAGMA
disable_checkpoint_on_shutdown``, which leaves the write-ahead log for the next open to replay).

Each repetition ticks the three sensors twice in the daemon's order (import, search, coverage) on a fresh copy of a
store (a soak's, mid-soak) with an empty instance, every option on the same copy in turn; each tick split into
opening the file, the store's statements, closing connections (the file's checkpoint) and the rest (Dagster,
Python). ``python -m bench.duckdb_ticks STORE`` prints the medians.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import dagster as dg
import duckdb

from bench.policy import SENSORS, evaluate
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import DuckDBStore, Transaction, duckdb_store

OPTIONS = {
    "opened per transaction": (False, True),
    "held for the tick": (True, True),
    "opened per transaction, no checkpoint on closing": (False, False),
    "held for the tick, no checkpoint on closing": (True, False),
}
PARTS = ("open", "statements", "close")


@contextmanager
def _option(held: bool, checkpoint: bool, seconds: dict[str, float]) -> Iterator[None]:
    """The store visiting its file the option's way while the block runs, the time of each part added up."""
    saved = DuckDBStore.held, DuckDBStore._connect, Transaction.run, duckdb_store.closing

    def connect(store: DuckDBStore, path: Path) -> duckdb.DuckDBPyConnection:
        started = time.perf_counter()
        connection = saved[1](store, path)
        if not checkpoint:
            connection.execute("PRAGMA disable_checkpoint_on_shutdown")
        seconds["open"] += time.perf_counter() - started
        return connection

    def run(transaction: Transaction, statement: str, **params: object) -> None:
        started = time.perf_counter()
        try:
            saved[2](transaction, statement, **params)
        finally:
            seconds["statements"] += time.perf_counter() - started

    @contextmanager
    def closing(connection: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
        with saved[3](connection) as opened:
            try:
                yield opened
            finally:
                # Timed from the block's end to the close's: what closing costs.
                started = time.perf_counter()
        seconds["close"] += time.perf_counter() - started

    if not held:
        DuckDBStore.held = lambda store: nullcontext()
    DuckDBStore._connect, Transaction.run, duckdb_store.closing = connect, run, closing
    try:
        yield
    finally:
        DuckDBStore.held, DuckDBStore._connect, Transaction.run, duckdb_store.closing = saved


def measure(store: Path, releases: Path, release: str, repetitions: int) -> dict[str, dict[str, dict[str, float]]]:
    """Per option, round (first, next) and sensor: the median tick and its parts, in seconds."""
    ticks: dict[str, dict[str, list[dict[str, float]]]] = {option: {} for option in OPTIONS}
    with tempfile.TemporaryDirectory() as scratch:
        copy = Path(scratch) / "store.duckdb"
        for _ in range(repetitions):
            for option, (held, checkpoint) in OPTIONS.items():
                for left in Path(scratch).iterdir():
                    left.unlink()
                shutil.copy(store, copy)
                resources = {
                    "store": StoreResource(database=str(copy)),
                    "overture": OvertureResource(root=str(releases), release=release),
                }
                cursors: dict[str, str | None] = dict.fromkeys(SENSORS)
                with dg.instance_for_test() as instance:
                    for round_name in ("first", "next"):
                        for name, sensor in SENSORS.items():
                            seconds = dict.fromkeys(PARTS, 0.0)
                            with _option(held, checkpoint, seconds):
                                figures, data = evaluate(sensor, instance, resources, cursors[name])
                            cursors[name] = data.cursor
                            seconds["tick"] = figures["seconds"]
                            ticks[option].setdefault(f"{round_name} {name}", []).append(seconds)
    return {
        option: {
            tick: {part: round(statistics.median(s[part] for s in samples), 3) for part in ("tick", *PARTS)}
            for tick, samples in rounds.items()
        }
        for option, rounds in ticks.items()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.duckdb_ticks", description=__doc__)
    parser.add_argument("store", type=Path, help="a DuckDB store file (copied, never changed)")
    parser.add_argument("--releases", type=Path, default=Path(__file__).parent / "out" / "soak_overture")
    parser.add_argument("--release", default="2026-10-15.0")
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args(argv)
    figures = measure(args.store, args.releases, args.release, args.repetitions)
    print("| option | tick | tick s | open s | statements s | close s |")
    print("|---|---|---:|---:|---:|---:|")
    for option, rounds in figures.items():
        for tick, row in rounds.items():
            print(f"| {option} | {tick} | {' | '.join(f'{row[part]:.2f}' for part in ('tick', *PARTS))} |")


if __name__ == "__main__":
    main()
