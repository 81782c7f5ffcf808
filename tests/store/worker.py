"""A separate process for the store tests: ``python worker.py COMMAND STORE_URL JSON_ARGS``.

It prints ``ready`` once imported and connected to nothing, waits for a line on stdin (so that many workers
start their work at the same moment), does the work and prints its result as one JSON line.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import datetime

import duckdb
import pyarrow as pa
import store_helpers

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import ImportRun
from nakodo_dagster.store import NewCampaign, Transaction, open_store, targeting_from_json


def reserve(url: str, args: dict) -> list:
    store = open_store(url)
    missing: dict[str, list[str]] = {}
    for area, category in args["pairs"]:
        missing.setdefault(area, []).append(category)
    stamp, now = datetime.fromisoformat(args["stamp"]), datetime.fromisoformat(args["now"])
    got = store_helpers.reserve_pairs(store, missing, stamp, now)
    return [[area, category] for area, categories in got.items() for category in categories]


def reserve_missing(url: str, args: dict) -> list:
    reservation = open_store(url).reserve_missing(datetime.fromisoformat(args["now"]), max_runs=10_000)
    return [list(pair) for run in reservation.runs for pair in run.pairs]


def add_campaign(url: str, args: dict) -> dict:
    """Add a campaign to an account: its id, or the refusal's message."""
    try:
        targeting = targeting_from_json(args["targeting"])
        return {"id": open_store(url).add_campaign(args["name"], targeting, account_id=args["account_id"])}
    except InvalidInput as exc:
        return {"refused": str(exc)}


def add_campaigns(url: str, args: dict) -> dict:
    """Add campaigns together: their ids, or the refusal's message."""
    try:
        new = [NewCampaign(c["name"], c["account_id"], targeting_from_json(c["targeting"])) for c in args["campaigns"]]
        return {"ids": open_store(url).add_campaigns(new)}
    except InvalidInput as exc:
        return {"refused": str(exc)}


def migrate(url: str, args: dict) -> int:
    store = open_store(url)
    store.migrate()
    return store_helpers.schema_version(store)


def hold(url: str, args: dict) -> None:
    """Keep the DuckDB file open (and so locked) until the next line on stdin."""
    with duckdb.connect(url):
        print("holding", flush=True)
        sys.stdin.readline()


def write_and_die(url: str, args: dict) -> None:
    """Start write_import and die by SIGKILL once the pairs are recorded and their old places deleted."""
    run = Transaction.run

    def run_or_die(self, sql: str, **params) -> None:
        if sql.lstrip().startswith("INSERT INTO places "):
            os.kill(os.getpid(), signal.SIGKILL)
        run(self, sql, **params)

    Transaction.run = run_or_die
    store = open_store(url)
    store.write_import(
        ImportRun.from_payload(args["run"]),
        args["release"],
        pa.Table.from_pylist(args["places"]),
        datetime.fromisoformat(args["now"]),
    )


COMMANDS = {
    "reserve": reserve,
    "reserve-missing": reserve_missing,
    "add-campaign": add_campaign,
    "add-campaigns": add_campaigns,
    "migrate": migrate,
    "hold": hold,
    "write-and-die": write_and_die,
}

if __name__ == "__main__":
    command, url, raw_args = sys.argv[1:]
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(COMMANDS[command](url, json.loads(raw_args))), flush=True)
