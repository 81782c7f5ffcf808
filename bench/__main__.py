"""``python -m bench``: build a release shaped like Overture's, serve it from S3 on loopback behind a latency,
and measure this project's import against the naive DuckDB query and a pyarrow dataset, side by side."""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import boto3
from moto.server import ThreadedMotoServer

from bench.policy import measure_policy
from bench.proxy import LatencyProxy
from bench.report import write_results
from bench.search import measure_search
from nakodo_dagster.overture.index import load_index
from nakodo_dagster.overture.reader import longitude_ranges, query_column
from nakodo_dagster.overture.sample import DEFAULT_RELEASE, publish_releases, write_sample_release
from nakodo_dagster.placement import ImportRun, cell, cells_around, country_area, import_runs

HERE = Path(__file__).parent
BUCKET = "nakodo-bench"
PREFIX = "release"
READERS = ("index", "duckdb", "pyarrow")
CATEGORIES = ("bakery", "cafe", "restaurant")
# Paris: dense enough that a block holds many row groups, as a city block does in Overture.
PARIS = (48.8566, 2.3522)


def cases() -> dict[str, dict]:
    """The measured cases: each a description and the import runs it takes."""
    block_cells = {c.key: c for c in (cell(48.0 + i / 2, 2.0 + j / 2) for i in range(4) for j in range(4))}
    gb = country_area("GB")
    campaign = {c.key: c for c in cells_around(*PARIS, 200)}
    return {
        "a": {
            "title": "one 4 x 4 block (Paris), 3 categories",
            "runs": import_runs({key: list(CATEGORIES) for key in block_cells}, block_cells),
        },
        "b": {
            "title": "one country (GB), 3 categories",
            "runs": [ImportRun((gb.key,), CATEGORIES, gb.bbox, "GB", tuple((gb.key, c) for c in CATEGORIES))],
        },
        "c": {
            "title": "full import of a 200 km campaign (Paris), its blocks two at a time",
            "runs": import_runs({key: list(CATEGORIES) for key in campaign}, campaign),
        },
    }


def release(folder: Path, rows: int) -> Path:
    """The bench's release, written once per row count and reused."""
    root = folder / f"overture-{rows}"
    if not (root / DEFAULT_RELEASE).exists():
        shutil.rmtree(root, ignore_errors=True)
        write_sample_release(root, rows=rows, seed=7)
    return root


def serve(root: Path, server: ThreadedMotoServer) -> str:
    """Upload the release to the loopback S3 server, readable by anyone as Overture's bucket is; its s3:// root."""
    host, port = server.get_host_and_port()
    client = boto3.client(
        "s3",
        endpoint_url=f"http://{host}:{port}",
        region_name="us-west-2",
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
    )
    return publish_releases(client, root, BUCKET, PREFIX)


def run_worker(spec: dict, proxy: LatencyProxy) -> dict:
    """One read in a fresh process, with the requests and bytes the proxy saw during it."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    environ |= {"AWS_ENDPOINT_URL": proxy.url, "AWS_EC2_METADATA_DISABLED": "true"}
    proxy.reset()
    output = subprocess.run(
        [sys.executable, "-m", "bench.worker", json.dumps(spec)],
        check=True,
        capture_output=True,
        text=True,
        env=environ,
        cwd=HERE.parent,
    )
    traffic = proxy.reset()
    return json.loads(output.stdout.splitlines()[-1]) | {"requests": traffic.requests, "bytes": traffic.bytes}


def floor_bytes(index_dir: Path, root: str, runs: list[ImportRun]) -> int:
    """The bytes no reader can avoid: the query's columns of the row groups whose statistics meet each box."""
    index = load_index(next(index_dir.rglob(f"{DEFAULT_RELEASE}.parquet")))
    total = 0
    for run in runs:
        west, south, east, north = run.bbox
        rows = index.intersecting(south, north, longitude_ranges(west, east))
        total += sum(length for *_, length in index.chunks(rows, query_column))
    return total


def main(argv: list[str] | None = None) -> None:
    """Run the whole bench and write bench/results.md and bench/results.json."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--rows", type=int, default=2_000_000, help="places in the release (default 2,000,000)")
    parser.add_argument("--latency-ms", type=float, default=40.0, help="added to every HTTP request (default 40)")
    parser.add_argument("--bandwidth-mbps", type=float, default=None, help="per-request bandwidth cap, MB/s")
    parser.add_argument("--repeat", type=int, default=3, help="runs per reader and case; the median is reported")
    parser.add_argument("--search-places", type=int, default=1_000_000, help="places loaded for case (d)")
    parser.add_argument("--campaigns", type=int, default=1_000, help="campaigns in the policy tick")
    parser.add_argument(
        "--postgres", default="postgresql://postgres@127.0.0.1:5432/test", help="admin database for the policy"
    )
    parser.add_argument("--out", type=Path, default=HERE, help="where results.md and results.json go")
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    work = HERE / "out"
    work.mkdir(exist_ok=True)
    started = time.perf_counter()
    print(f"release of {args.rows:,} places ...", flush=True)
    local_root = release(work, args.rows)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        root = serve(local_root, server)
        bandwidth = args.bandwidth_mbps * 1e6 if args.bandwidth_mbps else None
        with LatencyProxy(server.get_host_and_port(), args.latency_ms / 1000, bandwidth) as proxy:
            index_dir = work / "index"
            shutil.rmtree(index_dir, ignore_errors=True)
            base = {"root": root, "release": DEFAULT_RELEASE, "index_dir": str(index_dir)}
            print("index build ...", flush=True)
            build = run_worker(base | {"reader": "build", "runs": []}, proxy)
            measured = {}
            for name, case in cases().items():
                runs = case["runs"]
                figures = {"title": case["title"], "runs": len(runs), "floor_bytes": floor_bytes(index_dir, root, runs)}
                for reader in READERS:
                    print(f"case ({name}) {reader} ...", flush=True)
                    spec = base | {"reader": reader, "runs": [run.payload() for run in runs]}
                    figures[reader] = [run_worker(spec, proxy) for _ in range(args.repeat)]
                measured[name] = figures
    finally:
        server.stop()
    print("case (d) search ...", flush=True)
    search = measure_search(work, args.search_places, *PARIS, 200, ("bakery", "cafe", "pub", "restaurant", "hotel"))
    print("policy tick on PostgreSQL ...", flush=True)
    policy = measure_policy(args.postgres, str(local_root), args.campaigns, 200, 5)
    results = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },
        "versions": {name: version(name) for name in ("duckdb", "pyarrow", "moto", "psycopg2-binary", "urllib3")},
        "parameters": {
            "rows": args.rows,
            "files": 16,
            "row_groups_per_file": 256,
            "latency_ms": args.latency_ms,
            "bandwidth_mbps": args.bandwidth_mbps,
            "repeat": args.repeat,
            "search_places": args.search_places,
            "campaigns": args.campaigns,
            "release_bytes": sum(p.stat().st_size for p in local_root.rglob("*.parquet")),
        },
        "index_build": build,
        "cases": measured,
        "search": search,
        "policy": policy,
        "bench_seconds": time.perf_counter() - started,
    }
    write_results(results, args.out)
    print(f"done in {results['bench_seconds']:.0f} s: {args.out / 'results.md'}")


if __name__ == "__main__":
    main()
