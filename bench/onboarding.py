"""Onboarding in bulk: the soak's fleet (200 km circles, 5 categories of 20, accounts of 100 campaigns, every fifth
on pro with 20) written as a campaign file and imported into a new store with ``nakodo campaign import``, as an
agency moving in runs it, on both backends: the command's seconds end to end, and its phases in this process on
another new store (reading the file, checking and writing the campaigns, the planner's statistics).

``python -m bench.onboarding`` prints the figures as JSON; ``--campaigns 100000`` for the big fleet.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.policy import scratch_database
from bench.soak import fleet, fleet_accounts, fleet_names
from nakodo_dagster.cli.campaign_file import CATEGORY_SEPARATOR, FIELDS, read_campaign_file
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.store import open_store

NAKODO = str(Path(sys.executable).with_name("nakodo"))
BACKENDS = ("duckdb", "postgres")


def write_campaign_csv(path: Path, targetings: Sequence[Targeting], owners: list[int]) -> None:
    """The campaigns as ``nakodo campaign import`` takes a CSV, one line per location, named as the soak names
    the campaigns it adds."""
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(FIELDS)
        for targeting, account, name in zip(targetings, owners, fleet_names(owners), strict=True):
            categories = CATEGORY_SEPARATOR.join(targeting.categories)
            for location in targeting.locations:
                if isinstance(location, PointLocation):
                    where = [location.lat, location.lng, location.radius_km, ""]
                else:
                    where = ["", "", "", location.country_code]
                writer.writerow([name, account, *where, categories])


def _prepared(database: str, work: Path, campaigns: int, seed: int) -> Path:
    """A new store with the fleet's accounts, and the fleet's campaign file."""
    store = open_store(database)
    store.migrate()
    targetings = fleet(campaigns, seed)
    path = work / f"onboarding_{campaigns}_{seed}.csv"
    write_campaign_csv(path, targetings, fleet_accounts(store, len(targetings)))
    return path


def onboard(database: str, path: Path, by: str) -> float:
    """Seconds to create the campaigns of the file at ``path``: ``import``, the command as a user runs it (one
    transaction, then the statistics); ``add``, the store's add_campaign one campaign at a time, as campaigns were
    seeded before the command."""
    started = time.perf_counter()
    if by == "import":
        command = [NAKODO, "campaign", "import", str(path)]
        subprocess.run(command, env={**os.environ, "NAKODO_DATABASE": database}, check=True, stdout=subprocess.DEVNULL)
    else:
        store = open_store(database)
        for new in read_campaign_file(path).campaigns:
            store.add_campaign(new.campaign.name, new.campaign.targeting, account_id=new.campaign.account_id)
    return time.perf_counter() - started


def measure_onboarding(backend: str, admin_url: str, work: Path, campaigns: int, seed: int = 0) -> dict:
    """``nakodo campaign import`` of ``campaigns`` campaigns into a new store on ``backend``, end to end, then its
    phases on another."""
    with scratch_database(backend, admin_url, work) as database:
        command_s = onboard(database, _prepared(database, work, campaigns, seed), "import")
        imported = len(open_store(database).campaigns())
    with scratch_database(backend, admin_url, work) as database:
        path = _prepared(database, work, campaigns, seed)
        store = open_store(database)
        phases = {}
        started = time.perf_counter()
        read = read_campaign_file(path)
        phases["read_s"] = time.perf_counter() - started
        started = time.perf_counter()
        store.add_campaigns([c.campaign for c in read.campaigns])
        phases["check_and_write_s"] = time.perf_counter() - started
        started = time.perf_counter()
        store.refresh_campaign_statistics()
        phases["statistics_s"] = time.perf_counter() - started
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "backend": backend,
        "campaigns": campaigns,
        "imported": imported,
        "command_s": round(command_s, 1),
        **{name: round(seconds, 2) for name, seconds in phases.items()},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.onboarding", description=__doc__)
    parser.add_argument("--campaigns", type=int, default=10_000, help="campaigns in the file (default 10,000)")
    parser.add_argument("--backend", choices=BACKENDS, action="append", help="default: both")
    parser.add_argument("--seed", type=int, default=0, help="the fleet's seed (default 0)")
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / "out", help="where the file is kept")
    parser.add_argument(
        "--only",
        choices=("import", "add"),
        help="only create the campaigns, on a new store of the first backend: with the command, or one add at a time",
    )
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    backends = args.backend or BACKENDS
    if args.only:
        with scratch_database(backends[0], args.postgres, args.work) as database:
            path = _prepared(database, args.work, args.campaigns, args.seed)
            print(json.dumps({"by": args.only, "seconds": round(onboard(database, path, args.only), 2)}))
        return
    figures = [measure_onboarding(backend, args.postgres, args.work, args.campaigns, args.seed) for backend in backends]
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
