"""One measured read in a fresh process: ``python -m bench.worker '<json>'`` prints the read's figures as JSON.

A fresh process per read keeps every reader cold (no footer cached from an earlier read) and makes its peak
memory its own. Imports are not timed, pandas' included: pyarrow and DuckDB import it on first taking in Python
values or an Arrow table (0.16 s), and an import run's worker has it already (``launcher.DEFAULT_PRELOAD``).
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas  # noqa: F401 (imported before the clock starts, see above)
import pyarrow.dataset as ds
import pyarrow.fs as pafs

from nakodo_dagster.overture.duck import s3_settings
from nakodo_dagster.overture.index import build_index
from nakodo_dagster.overture.reader import query_column, read_places
from nakodo_dagster.placement import ImportRun

# At most two import runs execute at once, as Dagster's queue allows.
CONCURRENT_RUNS = 2


def peak_mb() -> float:
    """This process's peak resident memory. Not ru_maxrss: Linux carries that over from the parent across exec."""
    status = Path("/proc/self/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("VmHWM:")).split()[1]) / 1024


def pyarrow_rows(run: ImportRun, root: str, release: str) -> int:
    """The run's box read as overturemaps-py reads it: a pyarrow dataset over S3, every column, a bbox filter."""
    settings = s3_settings(os.environ)
    filesystem = pafs.S3FileSystem(
        anonymous=True,
        region=settings["region"],
        endpoint_override=settings["endpoint"],
        scheme="https" if settings["use_ssl"] else "http",
    )
    folder = f"{root.removeprefix('s3://')}/{release}/theme=places/type=place"
    dataset = ds.dataset(folder, filesystem=filesystem, format="parquet")
    west, south, east, north = run.bbox
    condition = (
        (ds.field("bbox", "xmin") <= east)
        & (ds.field("bbox", "xmax") >= west)
        & (ds.field("bbox", "ymin") <= north)
        & (ds.field("bbox", "ymax") >= south)
    )
    return sum(batch.num_rows for batch in dataset.to_batches(filter=condition))


def measure(spec: dict) -> dict:
    """Run one reader over a case's runs, two at a time; the read's wall time, rows and peak memory."""
    if spec["reader"] == "build":
        started = time.perf_counter()
        index, _ = build_index(spec["root"], spec["release"], spec["index_dir"], query_column)
        seconds = time.perf_counter() - started
        return {"seconds": seconds, "rows": len(index.row_groups), "peak_mb": peak_mb()}
    runs = [ImportRun.from_payload(payload) for payload in spec["runs"]]
    index_dir = spec["index_dir"] if spec["reader"] == "index" else None

    def rows(run: ImportRun) -> int:
        if spec["reader"] == "pyarrow":
            return pyarrow_rows(run, spec["root"], spec["release"])
        return read_places(run, spec["root"], spec["release"], index_dir=index_dir).table.num_rows

    started, cpu_started = time.perf_counter(), time.process_time()
    with ThreadPoolExecutor(CONCURRENT_RUNS) as pool:
        total = sum(pool.map(rows, runs))
    seconds = time.perf_counter() - started
    # Every thread's, the HTTP client's and the decoders' included: what the read asks of the machine's cores.
    cpu_seconds = time.process_time() - cpu_started
    return {"seconds": seconds, "cpu_seconds": cpu_seconds, "rows": total, "peak_mb": peak_mb()}


if __name__ == "__main__":
    print(json.dumps(measure(json.loads(sys.argv[1]))))
