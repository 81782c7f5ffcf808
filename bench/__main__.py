"""``python -m bench``: build a release shaped like Overture's, serve it from S3 on loopback behind a latency, and
measure this project's import against the naive DuckDB query and a pyarrow dataset, side by side (readers); the same at
Overture's scale, millions of places, against a pyarrow dataset in turn (overture); a campaign's search over a million
loaded places on both backends (search); both sensors' ticks at 100 to 10,000 campaigns and the search runs they ask for
an hour (policy); block import runs an hour through a real dagster-daemon, on the embedded default's instance and on a
PostgreSQL one (daemon); a new account's wait for its first businesses behind another account's backlog (fleet); the
three sensors in the daemon's order over a simulated day of a 10,000-campaign fleet on PostgreSQL and 1,000 on DuckDB,
something changed before every tick (soak); the same fleet imported with `nakodo campaign import` into a PostgreSQL
store never analyzed, its first import runs lost (cold); the fleet through faults of its own machinery, the daemon
killed and restarted, its code server killed, run workers killed, imports cancelled through the GraphQL API, campaigns
paused, accounts moved to a smaller plan, the PostgreSQL holding its store and Dagster's storage stopped, its object
store throttling, resetting and stalling, the release's files cut short, a new release published (faults: ``python -m
bench.faults`` alone, with a seed to replay); a new release read with its GERS changelog and without it, block runs and
bytes side by side (changelog).
``--only policy,search,daemon`` skips the readers' twenty minutes; figures of parts not run are kept."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from bench.changelog import measure_changelog
from bench.cold import measure_cold
from bench.daemon import measure_daemon
from bench.faults import measure_faults
from bench.fleet import measure_fleet
from bench.policy import measure_search_pace, measure_ticks, scratch_database
from bench.proxy import LatencyProxy
from bench.report import write_results
from bench.s3 import loopback_releases
from bench.search import measure_search
from bench.soak import measure_soak
from nakodo_dagster.overture.index import load_index, read_chunks
from nakodo_dagster.overture.reader import longitude_ranges, query_column
from nakodo_dagster.overture.sample import DEFAULT_RELEASE, write_sample_release
from nakodo_dagster.placement import ImportRun, cell, cells_around, country_area, import_runs

HERE = Path(__file__).parent
READERS = ("index", "duckdb", "pyarrow")
# The naive DuckDB reader takes minutes a read at this scale and is left out.
OVERTURE_READERS = ("index", "pyarrow")
CATEGORIES = ("bakery", "cafe", "restaurant")
# Paris: dense enough that a block holds many row groups, as a city block does in Overture.
PARIS = (48.8566, 2.3522)
# The country of the Overture-scale setting, as the issue measured it: in this sample it meets 685 row groups.
OVERTURE_COUNTRY = "FR"
# A country whose box meets about as many row groups as France did in Overture's own release (119): 114 here.
SPARSE_COUNTRY = "NL"
# A 4 x 4 block whose box meets about as many row groups as the block the issue measured (29, in Overture's own
# release): this sample's Paris is ten times denser than that.
SPARSE_BLOCK = ("Reykjavik", 64.0, -22.0)
# The shape of a big campaign: 200 km, 5 categories.
RADIUS_KM = 200
SEARCH_CATEGORIES = ("bakery", "cafe", "pub", "restaurant", "hotel")


def cases() -> dict[str, dict]:
    """The measured cases: each a description and the import runs it takes."""
    block_cells = {c.key: c for c in (cell(48.0 + i / 2, 2.0 + j / 2) for i in range(4) for j in range(4))}
    campaign = {c.key: c for c in cells_around(*PARIS, 200)}
    return {
        "a": {
            "title": "one 4 x 4 block (Paris), 3 categories",
            "runs": import_runs({key: list(CATEGORIES) for key in block_cells}, block_cells),
        },
        "b": {"title": "one country (GB), 3 categories", "runs": [country_run("GB")]},
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


def floor(index_dir: Path, runs: list[ImportRun]) -> tuple[int, int]:
    """The bytes no reader can avoid (the query's columns of the row groups whose statistics meet each box) and
    those row groups' number."""
    index = load_index(next(index_dir.rglob(f"{DEFAULT_RELEASE}.parquet")))
    total = groups = 0
    for run in runs:
        west, south, east, north = run.bbox
        rows = index.intersecting(south, north, longitude_ranges(west, east))
        total += int(read_chunks(index, rows, query_column)[:, 3].sum())
        groups += len(rows)
    return total, groups


@contextlib.contextmanager
def served(local_root: Path, latency_ms: float, bandwidth_mbps: float | None) -> Iterator[tuple[str, LatencyProxy]]:
    """The release on a loopback S3 server behind the latency proxy: its s3:// root and the proxy."""
    bandwidth = bandwidth_mbps * 1e6 if bandwidth_mbps else None
    with (
        loopback_releases(local_root) as (root, upstream),
        LatencyProxy(upstream, latency_ms / 1000, bandwidth) as proxy,
    ):
        yield root, proxy


PARTS = ("readers", "overture", "search", "policy", "daemon", "fleet", "soak", "cold", "faults", "changelog")
# The sections of results.json each part writes; a part not run keeps the figures it wrote last time.
SECTIONS = {
    "readers": ("index_build", "cases"),
    "overture": ("overture",),
    "search": ("search",),
    "policy": ("sensors", "search_runs"),
    "daemon": ("daemon", "daemon_postgres", "daemon_dagster_launcher"),
    "fleet": ("fleet",),
    "soak": ("soak",),
    "cold": ("cold",),
    "faults": ("faults",),
    "changelog": ("changelog",),
}
SECTION_NAMES = {section for sections in SECTIONS.values() for section in sections}
# Written by an earlier bench (one import tick through the sensor's old API): the sensors section supersedes it.
SUPERSEDED = ("policy",)


def _numbers(text: str) -> list[int]:
    return [int(number) for number in text.split(",") if number]


def _parts(text: str) -> list[str]:
    parts = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown part(s) {', '.join(unknown)}; choose from {', '.join(PARTS)}")
    return parts


def measure_readers(args: argparse.Namespace, work: Path, local_root: Path) -> dict:
    """Cases (a) to (c): the release served from S3 on loopback behind the latency proxy, each reader in turn."""
    with served(local_root, args.latency_ms, args.bandwidth_mbps) as (root, proxy):
        index_dir = work / "index"
        shutil.rmtree(index_dir, ignore_errors=True)
        base = {"root": root, "release": DEFAULT_RELEASE, "index_dir": str(index_dir)}
        print("index build ...", flush=True)
        build = run_worker(base | {"reader": "build", "runs": []}, proxy)
        measured = {}
        for name, case in cases().items():
            runs = case["runs"]
            figures = {"title": case["title"], "runs": len(runs), "floor_bytes": floor(index_dir, runs)[0]}
            for reader in READERS:
                print(f"case ({name}) {reader} ...", flush=True)
                spec = base | {"reader": reader, "runs": [run.payload() for run in runs]}
                figures[reader] = [run_worker(spec, proxy) for _ in range(args.repeat)]
            measured[name] = figures
    return {"index_build": build, "cases": measured}


def overture_cases() -> dict[str, dict]:
    """The Overture-scale setting's reads: case (a)'s dense block, a block and a country about the size of the
    issue's (in row groups met), and the issue's country, ten times denser here."""
    name, lat0, lng0 = SPARSE_BLOCK
    sparse = {c.key: c for c in (cell(lat0 + i / 2, lng0 + j / 2) for i in range(4) for j in range(4))}
    return {
        "block": {"title": cases()["a"]["title"], "runs": cases()["a"]["runs"]},
        "sparse block": {
            "title": f"one 4 x 4 block ({name}), 3 categories",
            "runs": import_runs({key: list(CATEGORIES) for key in sparse}, sparse),
        },
        "country": {
            "title": f"one country ({OVERTURE_COUNTRY}), 3 categories",
            "runs": [country_run(OVERTURE_COUNTRY)],
        },
        "sparse country": {
            "title": f"one country ({SPARSE_COUNTRY}), 3 categories",
            "runs": [country_run(SPARSE_COUNTRY)],
        },
    }


def country_run(code: str) -> ImportRun:
    """The import run of a whole country and the bench's categories."""
    country = country_area(code)
    return ImportRun((country.key,), CATEGORIES, country.bbox, code, tuple((country.key, c) for c in CATEGORIES))


def measure_overture(args: argparse.Namespace, work: Path) -> dict:
    """The issue's setting: millions of places in 16 files of 256 row groups behind a fixed latency; the index
    built afresh in several fresh processes, then each read by this project and by a pyarrow dataset in turn."""
    local_root = release(work, args.overture_rows)
    with served(local_root, args.latency_ms, None) as (root, proxy):
        index_dir = work / "overture_index"
        base = {"root": root, "release": DEFAULT_RELEASE, "index_dir": str(index_dir)}
        builds = []
        for number in range(args.overture_repeat):
            print(f"overture: index build {number + 1} ...", flush=True)
            shutil.rmtree(index_dir, ignore_errors=True)
            builds.append(run_worker(base | {"reader": "build", "runs": []}, proxy))
        measured = {}
        for name, case in overture_cases().items():
            runs = case["runs"]
            floor_total, floor_groups = floor(index_dir, runs)
            figures: dict = {"title": case["title"], "floor_bytes": floor_total, "floor_row_groups": floor_groups}
            figures |= {reader: [] for reader in OVERTURE_READERS}
            # In turn, so that the machine's other work weighs on both readers alike.
            for number in range(args.overture_repeat):
                for reader in OVERTURE_READERS:
                    print(f"overture: {name} {reader} {number + 1} ...", flush=True)
                    spec = base | {"reader": reader, "runs": [run.payload() for run in runs]}
                    figures[reader].append(run_worker(spec, proxy))
            measured[name] = figures
    return {
        "overture": {
            "rows": args.overture_rows,
            "files": 16,
            "row_groups_per_file": 256,
            "release_bytes": sum(p.stat().st_size for p in local_root.rglob("*.parquet")),
            "latency_ms": args.latency_ms,
            "repeat": args.overture_repeat,
            "load_before": os.getloadavg(),
            "index_build": builds,
            "cases": measured,
        }
    }


def measure_policy(args: argparse.Namespace, work: Path, local_root: Path) -> dict:
    """Both sensors' ticks at each scale and backend, and the search runs asked for an hour."""
    scales = [("postgres", n) for n in args.campaigns] + [("duckdb", n) for n in args.duckdb_campaigns]
    sensors = []
    for backend, campaigns in scales:
        print(f"sensor ticks, {campaigns:,} campaigns on {backend} ...", flush=True)
        sensors.append(
            measure_ticks(backend, args.postgres, work, str(local_root), campaigns, RADIUS_KM, args.tick_repeat)
        )
    print(f"search runs an hour over {args.search_pace_minutes:g} minutes ...", flush=True)
    pace = measure_search_pace(
        args.postgres, work, str(local_root), args.search_pace_campaigns, RADIUS_KM, args.search_pace_minutes
    )
    return {"sensors": sensors, "search_runs": pace}


def main(argv: list[str] | None = None) -> None:
    """Run the bench (every part, or those ``--only`` names) and write bench/results.md and bench/results.json,
    keeping the figures of the parts not run."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "--only",
        type=_parts,
        default=list(PARTS),
        help=f"comma-separated parts to measure, of {','.join(PARTS)} (default all; readers take about 20 minutes)",
    )
    parser.add_argument("--rows", type=int, default=2_000_000, help="places in the release (default 2,000,000)")
    parser.add_argument("--latency-ms", type=float, default=40.0, help="added to every HTTP request (default 40)")
    parser.add_argument("--bandwidth-mbps", type=float, default=None, help="per-request bandwidth cap, MB/s")
    parser.add_argument("--repeat", type=int, default=3, help="runs per reader and case; the median is reported")
    parser.add_argument(
        "--overture-rows", type=int, default=4_100_000, help="places in the Overture-scale release (4,100,000)"
    )
    parser.add_argument(
        "--overture-repeat", type=int, default=5, help="fresh processes per read at Overture's scale; the median"
    )
    parser.add_argument("--search-places", type=int, default=1_000_000, help="places loaded for case (d)")
    parser.add_argument("--search-repeat", type=int, default=3, help="campaigns searched in case (d); medians")
    parser.add_argument(
        "--campaigns",
        type=_numbers,
        default=[100, 1_000, 10_000],
        help="campaign counts of the sensor ticks on PostgreSQL (default 100,1000,10000)",
    )
    parser.add_argument(
        "--duckdb-campaigns", type=_numbers, default=[1_000], help="campaign counts on DuckDB (default 1000)"
    )
    parser.add_argument("--tick-repeat", type=int, default=3, help="next ticks per sensor and scale; the median")
    parser.add_argument(
        "--search-pace-campaigns",
        type=_numbers,
        default=[100, 1_000],
        help="pending campaigns the search sensor ticks over, side by side (default 100,1000)",
    )
    parser.add_argument(
        "--search-pace-minutes", type=float, default=5.0, help="real minutes of search ticks (default 5)"
    )
    parser.add_argument("--daemon-runs", type=int, default=40, help="block runs through the daemon (default 40)")
    parser.add_argument(
        "--fleet-blocks", type=int, default=11_700, help="the large account's backlog, in blocks (default 11,700)"
    )
    parser.add_argument("--fleet-blocks-per-campaign", type=int, default=50, help="its blocks per campaign (50)")
    parser.add_argument(
        "--fleet-pace", type=float, default=900, help="block runs an hour when no daemon figure is kept (900)"
    )
    parser.add_argument("--soak-campaigns", type=int, default=10_000, help="the soak's fleet on PostgreSQL (10,000)")
    parser.add_argument("--duckdb-soak-campaigns", type=int, default=1_000, help="the soak's fleet on DuckDB (1,000)")
    # Every search opens the DuckDB file and checkpoints it on closing (about 0.3 s at 1,000 campaigns): the soak's
    # 93 rounds, 300 searches each, take 2.5 hours there. Every phase at 5 rounds takes 40 minutes.
    parser.add_argument(
        "--duckdb-soak-rounds", type=int, default=5, help="rounds per phase at most of the DuckDB soak (5; 0: all)"
    )
    parser.add_argument(
        "--cold-campaigns", type=int, default=10_000, help="the cold onboarding's fleet on PostgreSQL (10,000)"
    )
    parser.add_argument("--faults-seed", type=int, default=40, help="seed of the fault soak's schedule (default 40)")
    parser.add_argument("--faults-campaigns", type=int, default=300, help="campaigns of the fault soak (default 300)")
    parser.add_argument("--faults-accounts", type=int, default=6, help="accounts of the fault soak (default 6)")
    parser.add_argument("--faults-count", type=int, default=26, help="faults the soak injects (default 26)")
    parser.add_argument(
        "--postgres",
        default="postgresql://postgres@127.0.0.1:5432/test",
        help="admin database for the policy, the fleet and the daemon's PostgreSQL instance",
    )
    parser.add_argument(
        "--changelog-rows", type=int, default=1_000_000, help="places of the changelog's two releases (1,000,000)"
    )
    parser.add_argument("--out", type=Path, default=HERE, help="where results.md and results.json go")
    parser.add_argument(
        "--work", type=Path, default=HERE / "out", help="where releases and indexes are kept between runs (bench/out)"
    )
    args = parser.parse_args(argv)
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    work = args.work
    work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    # The fleet reads no release: it is written only for the parts that do.
    local_root = None
    if set(args.only) & {"readers", "policy", "daemon", "faults"}:
        print(f"release of {args.rows:,} places ...", flush=True)
        local_root = release(work, args.rows)
    path = args.out / "results.json"
    results = json.loads(path.read_text()) if path.exists() else {}
    for part in (part for part in PARTS if part in args.only):
        measured = measure_part(part, args, work, local_root)
        results = merge(results, part, measured, _parameters(args, part))
        if local_root:
            results["parameters"] |= {
                "rows": args.rows,
                "files": 16,
                "row_groups_per_file": 256,
                "release_bytes": sum(p.stat().st_size for p in local_root.rglob("*.parquet")),
            }
        results["bench_seconds"] = time.perf_counter() - started
        # After each part: a part that fails later costs only its own figures.
        write_results(results, args.out)
    print(f"done in {time.perf_counter() - started:.0f} s: {args.out / 'results.md'}")


def measure_part(part: str, args: argparse.Namespace, work: Path, local_root: Path | None) -> dict:
    """The sections of results.json one part measures."""
    if part == "readers":
        return measure_readers(args, work, local_root)
    if part == "overture":
        return measure_overture(args, work)
    if part == "search":
        searches = {}
        for backend in ("duckdb", "postgres"):
            print(f"case (d) search on {backend} ...", flush=True)
            with scratch_database(backend, args.postgres, work) as database:
                searches[backend] = measure_search(
                    database, args.search_places, *PARIS, RADIUS_KM, SEARCH_CATEGORIES, args.search_repeat
                ) | {"load_before": os.getloadavg()}
        return {"search": searches}
    if part == "policy":
        return measure_policy(args, work, local_root)
    if part == "daemon":
        runs = args.daemon_runs
        print(f"{runs} block runs through dagster-daemon, the embedded default, Dagster's launcher ...", flush=True)
        dagster_launcher = measure_daemon(str(local_root), runs, launcher="dagster")
        print(f"{runs} block runs through dagster-daemon, the embedded default ...", flush=True)
        embedded = measure_daemon(str(local_root), runs)
        print(f"{runs} block runs through dagster-daemon, a PostgreSQL instance ...", flush=True)
        postgres = measure_daemon(str(local_root), runs, "postgres", args.postgres)
        return {"daemon": embedded, "daemon_postgres": postgres, "daemon_dagster_launcher": dagster_launcher}
    if part == "soak":
        soaks = []
        for backend, campaigns, rounds in (
            ("postgres", args.soak_campaigns, None),
            ("duckdb", args.duckdb_soak_campaigns, args.duckdb_soak_rounds or None),
        ):
            print(f"soak: {campaigns:,} campaigns on {backend}, the sensors in the daemon's order ...", flush=True)
            soaks.append(measure_soak(backend, args.postgres, work, campaigns, max_rounds=rounds))
        return {"soak": soaks}
    if part == "cold":
        print(f"cold onboarding: {args.cold_campaigns:,} campaigns into a store never analyzed ...", flush=True)
        return {"cold": [measure_cold(args.postgres, work, args.cold_campaigns, "import")]}
    if part == "faults":
        print(
            f"fault soak: {args.faults_campaigns} campaigns over {args.faults_accounts} accounts, {args.faults_count} "
            f"faults (seed {args.faults_seed}) ...",
            flush=True,
        )
        figures = measure_faults(
            str(local_root),
            args.faults_seed,
            args.faults_campaigns,
            args.faults_count,
            accounts=args.faults_accounts,
        )
        return {"faults": figures}
    if part == "changelog":
        print(f"changelog: a release change of {args.changelog_rows:,} places, with and without it ...", flush=True)
        return {"changelog": measure_changelog(work, args.changelog_rows)}
    # At the pace the daemon part measured (this run's, or the last one kept in results.json).
    measured = json.loads((args.out / "results.json").read_text()) if (args.out / "results.json").exists() else {}
    pace = measured.get("daemon", {}).get("block_runs_per_hour", args.fleet_pace)
    print(f"fleet: a backlog of {args.fleet_blocks:,} blocks, a new account's campaign, at {pace:,} runs an hour ...")
    return {"fleet": measure_fleet(args.postgres, work, pace, args.fleet_blocks, args.fleet_blocks_per_campaign)}


def merge(previous: dict, part: str, measured: dict, parameters: dict) -> dict:
    """``previous`` results with one part's sections replaced, dated, and its parameters; the rest as they were."""
    now = datetime.now(UTC).isoformat(timespec="seconds")
    results = {key: value for key, value in previous.items() if key not in (*SUPERSEDED, "summary")} | measured
    # A results.json written before sections carried their own date: each of its sections dates from its "when".
    dated = {section: previous["when"] for section in previous if section in SECTION_NAMES}
    results["measured_at"] = dated | previous.get("measured_at", {}) | dict.fromkeys(SECTIONS[part], now)
    results["parameters"] = previous.get("parameters", {}) | parameters
    return results | {
        "when": now,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "processor": platform.processor() or platform.machine(),
        },
        "versions": {
            name: version(name) for name in ("dagster", "duckdb", "pyarrow", "moto", "psycopg2-binary", "obstore")
        },
    }


def _parameters(args: argparse.Namespace, part: str) -> dict:
    """The settings a part was measured with, kept beside its figures."""
    return {
        "readers": {
            "latency_ms": args.latency_ms,
            "bandwidth_mbps": args.bandwidth_mbps,
            "repeat": args.repeat,
        },
        "overture": {"overture_rows": args.overture_rows, "overture_repeat": args.overture_repeat},
        "search": {"search_places": args.search_places, "search_repeat": args.search_repeat},
        "policy": {
            "campaigns": args.campaigns,
            "duckdb_campaigns": args.duckdb_campaigns,
            "tick_repeat": args.tick_repeat,
            "search_pace_campaigns": args.search_pace_campaigns,
            "search_pace_minutes": args.search_pace_minutes,
        },
        "daemon": {"daemon_runs": args.daemon_runs},
        "fleet": {"fleet_blocks": args.fleet_blocks, "fleet_blocks_per_campaign": args.fleet_blocks_per_campaign},
        "cold": {"cold_campaigns": args.cold_campaigns},
        "soak": {
            "soak_campaigns": args.soak_campaigns,
            "duckdb_soak_campaigns": args.duckdb_soak_campaigns,
            "duckdb_soak_rounds": args.duckdb_soak_rounds,
        },
        "faults": {
            "faults_seed": args.faults_seed,
            "faults_campaigns": args.faults_campaigns,
            "faults_count": args.faults_count,
        },
        "changelog": {"changelog_rows": args.changelog_rows},
    }[part]


if __name__ == "__main__":
    main()
