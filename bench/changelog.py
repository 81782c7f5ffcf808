"""A release change with and without its changelog: the same campaigns' pairs, imported from one sample release, read
again from the next (a month's churn, some places edited and some reissued under new ids) twice, on two copies of the
store: once with the changelog beside the releases, once without. Counted: the block runs, those that read nothing,
the pairs carried over, the bytes read (the changelog's included) and the seconds; and whether both stores end with
the same places."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from tqdm import tqdm

from nakodo_dagster.imports.run import execute_import
from nakodo_dagster.overture.reader import read_places
from nakodo_dagster.overture.sample import CITIES, ReleaseDrift, write_sample_release
from nakodo_dagster.placement import PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.resources import OvertureResource
from nakodo_dagster.store import open_store

BEFORE, AFTER = "2026-10-15.0", "2026-11-18.0"
# A month as the sample writes it: 3 % of the places gone and as many new, 2 % edited, 1 % under new ids.
DRIFT = ReleaseDrift(edited=0.02, reissued=0.01)
# Each city's campaign: a wide radius, so that it needs the quiet country around the city as well as its centre.
RADIUS_KM = 50
CATEGORIES = ("bakery", "cafe", "pub")


def _bucket(work: Path, rows: int) -> Path:
    """The two releases under release/ and the second's changelog under changelog/, written once per size."""
    bucket = work / f"changelog_{rows}"
    if not (bucket / "changelog" / AFTER).is_dir():
        shutil.rmtree(bucket, ignore_errors=True)
        write_sample_release(bucket / "release", release=BEFORE, rows=rows)
        write_sample_release(
            bucket / "release", release=AFTER, rows=rows, drift=DRIFT, changelog_root=bucket / "changelog"
        )
    return bucket


def _runs() -> list:
    missing: dict[str, list[str]] = {}
    areas = {}
    for city in CITIES:
        targeting = Targeting((PointLocation(city.lat, city.lng, RADIUS_KM),), CATEGORIES)
        for key, area in areas_for(targeting).items():
            areas[key] = area
            missing[key] = list(CATEGORIES)
    return import_runs(missing, areas)


def _import_all(store, overture: OvertureResource, runs: list, release: str, label: str) -> dict:
    """Every run through the import's own code path; what they read and carried over."""
    figures = {"block_runs": len(runs), "runs_reading": 0, "pairs": 0, "pairs_carried": 0, "bytes_read": 0}
    figures |= {"changelog_bytes_read": 0, "rows_read": 0}
    started = time.perf_counter()
    for run in tqdm(runs, desc=label, unit="run", disable=None):
        outcome = execute_import(run, store, overture, release, stamp=None)
        figures["pairs"] += len(run.pairs)
        figures["pairs_carried"] += len(outcome.carried)
        if outcome.read is not None:
            figures["runs_reading"] += 1
            figures["bytes_read"] += outcome.read.stats.bytes_read or 0
            figures["rows_read"] += outcome.read.stats.rows
        if outcome.changes is not None:
            figures["changelog_bytes_read"] += outcome.changes.bytes_read
    figures["seconds"] = round(time.perf_counter() - started, 2)
    figures["total_bytes"] = figures["bytes_read"] + figures["changelog_bytes_read"]
    return figures


def _places(store) -> set[tuple]:
    return set(store._transact(lambda tx: tx.rows("SELECT area, category, id FROM places")))


def measure_changelog(work: Path, rows: int) -> dict:
    """Block runs and bytes of one release change, with the changelog and without it, on the same store."""
    bucket = _bucket(work, rows)
    root = str(bucket / "release")
    index = work / f"changelog_{rows}_index"
    runs = _runs()
    before = work / "changelog_before.duckdb"
    before.unlink(missing_ok=True)
    store = open_store(str(before))
    store.migrate()
    _import_all(store, OvertureResource(root=root, release=BEFORE, index=str(index)), runs, BEFORE, BEFORE)
    # The new release's index, built before either reading: what each reads is its own.
    read_places(runs[0], root, AFTER, index_dir=index)
    figures: dict = {"rows": rows, "release_before": BEFORE, "release": AFTER, "drift": vars(DRIFT) | {}}
    stores = {}
    for case, changelog in (("without_changelog", str(bucket / "no_changelog")), ("with_changelog", "")):
        copy = work / f"changelog_{case}.duckdb"
        shutil.copyfile(before, copy)
        stores[case] = open_store(str(copy))
        (bucket / "no_changelog").mkdir(exist_ok=True)
        overture = OvertureResource(root=root, release=AFTER, index=str(index), changelog=changelog)
        figures[case] = _import_all(stores[case], overture, runs, AFTER, case.replace("_", " "))
    figures["same_places"] = _places(stores["with_changelog"]) == _places(stores["without_changelog"])
    return figures
