"""The cold onboarding: a new PostgreSQL store whose tables were never analyzed (autovacuum off, as before its first
pass), the soak's fleet added in one go, then the code location's sensors in the daemon's order (import, search,
coverage, then again). One round of the import sensor's runs never reaches Dagster: the next import tick, past the
launch grace, takes them all back (a daemon restarted between a tick and its launches).

``--by add`` adds the campaigns with the store's add_campaigns and takes no statistics (the worst case: the first
sensor tick takes them, ``Store.keep_statistics``);
``--by import`` runs ``nakodo campaign import`` as an agency moving in does (the campaign tables analyzed after).
``python -m bench.cold`` prints every tick's seconds and slowest statement as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import time_machine

from bench.onboarding import _prepared, onboard
from bench.policy import SENSORS, TICK_INTERVAL_S, evaluate, launch, scratch_database
from bench.soak import StatementClock, tick_targets, worst_statistics
from nakodo_dagster.cli.campaign_file import read_campaign_file
from nakodo_dagster.overture.sample import write_sample_release
from nakodo_dagster.placement import LAUNCH_GRACE_MINUTES
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import open_store

RELEASE = "2026-10-15.0"
# Rounds in the daemon's order: the first, whose import runs never reach Dagster, the second, then the round past the
# launch grace whose import tick takes those runs' marks back, then one more.
ROUNDS = ("first, its import runs lost", "second", "after the launch grace", "next")
LOST = ROUNDS[0]


def _tick(clock: StatementClock, sensor: dg.SensorDefinition, instance, resources, cursor):
    with clock.on():
        figures, data = evaluate(sensor, instance, resources, cursor)
    return figures, data


def measure_cold(admin_url: str, work: Path, campaigns: int, by: str, seed: int = 0) -> dict:
    """The cold onboarding's ticks at ``campaigns`` campaigns: each tick's seconds, runs and slowest statement."""
    releases = work / "soak_overture"
    if not (releases / RELEASE).exists():
        write_sample_release(releases, release=RELEASE, rows=2_000, files=2, progress=False)
    ticks = []
    with ExitStack() as stack:
        database = stack.enter_context(scratch_database("postgres", admin_url, work))
        path = _prepared(database, work, campaigns, seed)
        store = open_store(database)
        started = time.perf_counter()
        if by == "import":
            onboard(database, path, "import")
        else:
            store.add_campaigns([c.campaign for c in read_campaign_file(path).campaigns])
        onboarding_s = time.perf_counter() - started
        analyzed = by == "analyzed"
        if analyzed:
            worst_statistics(database)
        instance = stack.enter_context(dg.instance_for_test())
        traveller = stack.enter_context(time_machine.travel(datetime.now(UTC) + timedelta(minutes=2), tick=True))
        resources = {
            "store": StoreResource(database=database),
            "overture": OvertureResource(root=str(releases), release=RELEASE),
        }
        cursors: dict[str, str | None] = dict.fromkeys(SENSORS)
        clock = StatementClock()
        for round_name in ROUNDS:
            for name, sensor in SENSORS.items():
                figures, data = _tick(clock, sensor, instance, resources, cursors[name])
                cursors[name] = data.cursor
                if not (round_name == LOST and name == "import"):
                    launch(instance, sensor, data)
                statement, statement_s = clock.slowest()
                top = sorted(clock.seconds.items(), key=lambda item: -item[1])[:4]
                ticks.append(
                    {
                        "round": round_name,
                        "sensor": name,
                        "seconds": round(figures["seconds"], 3),
                        "runs": figures["runs_requested"],
                        "slowest_statement": statement,
                        "slowest_statement_s": round(statement_s, 3),
                        "slowest_statements": {words: round(seconds, 3) for words, seconds in top},
                        "message": " ".join([figures["skip_message"] or "", *figures["log"]])[:300],
                    }
                )
                print(json.dumps(ticks[-1]), file=sys.stderr)
            shift = LAUNCH_GRACE_MINUTES * 60 + 1 if round_name == ROUNDS[1] else TICK_INTERVAL_S
            traveller.shift(timedelta(seconds=shift))
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "campaigns": campaigns,
        "by": by,
        "onboarding_s": round(onboarding_s, 1),
        "ticks": ticks,
    }


def cold_lines(colds: list[dict], when: str) -> list[str]:
    """The cold onboarding's section of results.md: each round's three ticks beside the soak's targets."""
    if not colds:
        return []
    lines = [
        f"## Cold onboarding: a store never analyzed (measured {when})",
        "",
        "A new PostgreSQL store (autovacuum off, no table ever analyzed), the soak's fleet (200 km campaigns of 5 "
        "categories in accounts of 100) imported with `nakodo campaign import` (which analyzes the campaigns' tables "
        "afterwards; `--by add` adds them with the store alone and analyzes nothing, `--by analyzed` analyzes every "
        "table after that), then the three sensors in the daemon's order, each of whose ticks first analyzes the "
        "tables written to beyond autovacuum's rule since their last analysis. The first round's import runs never "
        "reach Dagster; the round after the launch grace takes their marks back. `python -m bench.cold` runs it.",
        "",
    ]
    for cold in colds:
        most, _ = tick_targets(cold["campaigns"])
        slowest = max(cold["ticks"], key=lambda tick: tick["seconds"])
        lines += [
            f"**{cold['campaigns']:,} campaigns, by {cold['by']}**, measured {cold['measured_at']} (onboarding "
            f"{cold['onboarding_s']:,.1f} s): slowest "
            f"tick {slowest['seconds']:.2f} s, the {slowest['sensor']} sensor's in round {slowest['round']} "
            f"(target: every tick under {most:g} s, {'met' if slowest['seconds'] < most else 'missed'}).",
            "",
            "| round | import s | search s | coverage s | slowest statement of the round |",
            "|---|---:|---:|---:|---|",
        ]
        for round_name in dict.fromkeys(tick["round"] for tick in cold["ticks"]):
            ticks = {tick["sensor"]: tick for tick in cold["ticks"] if tick["round"] == round_name}
            worst = max(ticks.values(), key=lambda tick: tick["slowest_statement_s"])
            seconds = " | ".join(f"{ticks[sensor]['seconds']:.2f}" for sensor in SENSORS)
            statement = f"`{worst['slowest_statement'][:40]}` {worst['slowest_statement_s']:.2f} s"
            lines.append(f"| {round_name} | {seconds} | {statement} |")
        lines.append("")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.cold", description=__doc__)
    parser.add_argument("--campaigns", type=int, default=10_000, help="campaigns in the fleet (default 10,000)")
    parser.add_argument("--by", choices=("add", "import", "analyzed"), default="import")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--work", type=Path, default=Path(__file__).parent / "out")
    args = parser.parse_args(argv)
    args.work.mkdir(parents=True, exist_ok=True)
    figures = measure_cold(args.postgres, args.work, args.campaigns, args.by, args.seed)
    print(json.dumps(figures, indent=2))
    print("\n".join(cold_lines([figures], "now")), file=sys.stderr)


if __name__ == "__main__":
    main()
