"""The fault soak: the real ``dagster-daemon`` with the embedded default's dagster.yaml (its run launcher, run
monitoring, run retries and slot freeing) and a webserver, Dagster's own storage and the store on a PostgreSQL
cluster of the soak's own (or SQLite and a DuckDB file), a sample release read from a loopback S3 server through a
fault proxy, and campaigns over several accounts; while imports run, faults on a seeded schedule, each several
times: the daemon's whole process group killed with SIGKILL and started again, its code server killed alone, a
run's worker killed mid-import, an import cancelled through the webserver's GraphQL API while queued and while
running, a campaign paused and resumed while its imports run, an account moved to a smaller plan, the PostgreSQL
cluster stopped for 5 to 30 s and started again (the store's and Dagster's connections both cut), bursts of 5 to
60 s of the object store answering 503 SlowDown, resetting connections or stalling every request, the release's
files cut short in the bucket for 5 to 30 s, and a new release published.

At the end, from the store and the instance, not from logs: every pair an active campaign needs is loaded, none
marked failed, no mark waits without a run, no pair was imported by two runs at once, at most two import runs ran
at once, no pool slot is held by a run that ended; the pairs only campaigns paused by a smaller plan need are
explained by it (none failed, each such campaign with its plain reason); the store's kept coverage counts equal a
full recount; each active campaign holds exactly the businesses an independent reading of the release files gives
(none twice, none missing, none extra); every failed import run says why in one plain line.
``invariants_broken`` lists, in words, each that does not hold.

``python -m bench.faults [--seed N] [--campaigns N] [--accounts N] [--faults N] [--kinds K,...] [--store
postgres|duckdb] [--release-root PATH]`` prints the figures as JSON; the same seed replays the same schedule of
faults (the moments the runs meet them depend on the machine).
"""

from __future__ import annotations

import argparse
import json
import logging

from bench.faults.inject import KINDS, STORE_KINDS
from bench.faults.soak import STORES, measure_faults


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__)
    parser.add_argument("--seed", type=int, default=40, help="seed of the campaigns and the faults' schedule")
    parser.add_argument("--campaigns", type=int, default=300, help="campaigns over the sample release (default 300)")
    parser.add_argument("--accounts", type=int, default=6, help="accounts the campaigns are spread over (default 6)")
    # Two of each of the thirteen kinds (the cluster stopped among them).
    parser.add_argument("--faults", type=int, default=26, help="faults to inject (default 26)")
    parser.add_argument(
        "--kinds",
        type=lambda text: tuple(text.split(",")),
        help=f"the kinds of fault to inject, comma-separated (default: all of {', '.join(KINDS + STORE_KINDS)})",
    )
    parser.add_argument(
        "--release-root",
        help="a folder of releases, served from a loopback S3 server (default: a sample release written here)",
    )
    parser.add_argument(
        "--store",
        choices=STORES,
        default=STORES[0],
        help="the store and Dagster's storage: a PostgreSQL cluster the soak starts on a free port and stops for a "
        "while as a fault (default), or a DuckDB file and SQLite",
    )
    args = parser.parse_args(argv)
    unknown = set(args.kinds or ()) - set(KINDS + STORE_KINDS)
    if unknown:
        parser.error(f"unknown kinds of fault: {', '.join(sorted(unknown))}")
    # moto's server logs every request it answers: thousands of lines that bury the soak's own.
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    figures = measure_faults(
        args.release_root, args.seed, args.campaigns, args.faults, args.store, args.accounts, args.kinds
    )
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
