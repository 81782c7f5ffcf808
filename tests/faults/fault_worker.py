"""A separate process for the fault suite: ``python fault_worker.py COMMAND JSON_ARGS``.

It prints ``ready`` once loaded, waits for a line on stdin (so that the test decides when it starts, and several
start at the same moment), does its work and prints one JSON line. The test kills it when it likes.

- ``import``: execute one import_places run request on a shared Dagster instance, as a run worker does; with
  ``stop_after``, it prints ``stopped`` inside the store's transaction, right after the first statement containing
  that text, and waits there to be killed.
- ``daemon``: tick the import sensor on an instance of its own and execute every run it asked for.
- ``hold``: open a DuckDB file, insert a campaign in a transaction, and commit when told to.
"""

from __future__ import annotations

import importlib
import json
import sys

import duckdb


def _resources(args: dict) -> dict:
    from nakodo_dagster.resources import OvertureResource, StoreResource

    return {"store": StoreResource(database=args["store"]), "overture": OvertureResource(root=args["root"])}


# Dagster is imported by the commands that use it: a holder of the DuckDB file must start in a blink.


def _stop_inside_transaction(marker: str) -> None:
    # A kill timed from outside lands before or after the transaction on a loaded machine; stopping here puts it
    # in the middle of the write every time.
    from nakodo_dagster.store import Transaction

    run = Transaction.run

    def run_then_stop(self: Transaction, sql: str, **params: object) -> None:
        run(self, sql, **params)
        if marker in sql:
            print("stopped", flush=True)
            sys.stdin.readline()

    Transaction.run = run_then_stop


def run_import(args: dict) -> bool:
    import dagster as dg

    from nakodo_dagster.jobs.import_places import import_places

    if "stop_after" in args:
        _stop_inside_transaction(args["stop_after"])

    with dg.DagsterInstance.from_config(args["instance"]) as instance:
        request = args["request"]
        result = import_places.execute_in_process(
            run_config=request["run_config"],
            tags=request["tags"],
            instance=instance,
            resources=_resources(args),
            raise_on_error=False,
        )
        return result.success


def daemon(args: dict) -> list:
    """The pairs of every run this daemon's tick asked for and executed successfully."""
    import dagster as dg

    from nakodo_dagster.headless import register_partitions
    from nakodo_dagster.jobs.import_places import import_payload, import_places
    from nakodo_dagster.sensors.import_sensor import import_sensor

    resources = _resources(args)
    imported = []
    with dg.instance_for_test() as instance:
        ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
        register_partitions(instance, ticked)
        for request in ticked.run_requests or []:
            result = import_places.execute_in_process(
                run_config=request.run_config, tags=request.tags, instance=instance, resources=resources
            )
            assert result.success
            imported += import_payload(request.run_config)["pairs"]
    return imported


def hold(args: dict) -> str:
    with duckdb.connect(args["path"]) as connection:
        connection.begin()
        connection.execute("INSERT INTO campaigns (name, targeting, created_at) VALUES ('held', '{}', now())")
        print("holding", flush=True)
        sys.stdin.readline()
        connection.commit()
    return "committed"


COMMANDS = {"import": run_import, "daemon": daemon, "hold": hold}

if __name__ == "__main__":
    command, raw_args = sys.argv[1:]
    if command != "hold":
        # Loaded before "ready", so that released workers start their work at once, not their imports.
        importlib.import_module("nakodo_dagster.definitions")
    print("ready", flush=True)
    sys.stdin.readline()
    print(json.dumps(COMMANDS[command](json.loads(raw_args))), flush=True)
