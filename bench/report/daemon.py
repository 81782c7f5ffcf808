"""The daemon part: block import runs an hour through a real dagster-daemon, on the embedded default's instance
(with the project's launcher and with Dagster's) and on a PostgreSQL one."""

from __future__ import annotations

from collections.abc import Callable

from bench.report.common import GlanceRow, measured_when, verdict

# Issue 19: block runs an hour through the daemon, two at a time, on the embedded default.
BLOCK_RUNS_PER_HOUR_TARGET = 1_500
# What each step of a daemon-launched run's timeline is, for a missed block-run rate.
TIMELINE_WORK = {
    "run_enqueued_to_run_starting": "waiting in the queue for one of the two import slots, and the queued run "
    "coordinator's dequeue",
    "run_starting_to_process_started": "the daemon launching the run: forking its worker from the warm fork server "
    "(the project's launcher) or asking the code server to start a fresh Python that imports Dagster and the "
    "instance's storage (Dagster's default launcher); then the worker opening the instance",
    "process_started_to_run_start": "the run process loading the code location's definitions",
    "run_start_to_step_start": "the run process setting up the in-process executor and the resources",
    "step_start_to_asset_materialization": "the import itself: reading the block from the release and writing it",
    "asset_materialization_to_step_success": "logging each pair's materialisation and check evaluation",
    "step_success_to_run_success": "the run process finishing and reporting",
}
INSTANCES = {
    "daemon_dagster_launcher": "embedded default, Dagster's default launcher",
    "daemon": "embedded default (SQLite)",
    "daemon_postgres": "PostgreSQL",
}


def summarise(results: dict) -> dict:
    """Whether the embedded default launches block runs at the issue's rate."""
    if "daemon" not in results:
        return {}
    return {"daemon_target_met": results["daemon"]["block_runs_per_hour"] >= BLOCK_RUNS_PER_HOUR_TARGET}


def glance_rows(results: dict, summary: dict) -> list[GlanceRow]:
    """The embedded default's block-run rate against its target, for the glance."""
    if "daemon" not in results:
        return []
    return [
        GlanceRow(
            "block runs an hour through the daemon, two at a time",
            f"{results['daemon']['block_runs_per_hour']:,}",
            f"at least {BLOCK_RUNS_PER_HOUR_TARGET:,}",
            summary["daemon_target_met"],
        )
    ]


def sections(results: dict, summary: dict) -> list[str]:
    """The daemon's section of results.md: each instance's rate and a run's timeline, and a missed rate's cause."""
    if "daemon" not in results:
        return []
    daemon = results["daemon"]
    measured = {section: results[section] for section in INSTANCES if section in results}
    steps = [_run_step(key) for key in daemon["median_timeline_seconds"]]
    timelines = {
        section: {_run_step(key): seconds for key, seconds in figures["median_timeline_seconds"].items()}
        for section, figures in measured.items()
    }

    def row(label: str, value: Callable[[dict], object]) -> str:
        return f"| {label} | " + " | ".join(str(value(figures)) for figures in measured.values()) + " |"

    lines = [
        f"## Block import runs through the daemon (measured {measured_when(results, 'daemon')})",
        "",
        f"{daemon['runs']} block runs ({daemon['pairs_per_run']} pairs each) queued at once on a fresh instance and "
        "served by a real `dagster-daemon run`, the store in DuckDB "
        f"({daemon['pairs_loaded']:,} pairs loaded): the embedded default's instance "
        "(nakodo_dagster/data/dagster.yaml, SQLite, its run launcher forking each run's worker from a warm process: "
        "nakodo_dagster/launcher.py), the same with Dagster's default launcher (the code server starts a fresh "
        "Python per run), and the production instance (deploy/production/dagster.yaml, PostgreSQL on loopback, the "
        "embedded default's launcher in place of Kubernetes'), each with its queued run coordinator and two import "
        "runs at a time, measured one after the other. "
        f"Embedded default: **{daemon['block_runs_per_hour']:,} block runs an hour** (target at least "
        f"{BLOCK_RUNS_PER_HOUR_TARGET:,}: {verdict(summary['daemon_target_met'])}). The machine is shared: "
        "the load average when each finished is in the table.",
        "",
        "| | " + " | ".join(INSTANCES[section] for section in measured) + " |",
        "|---|" + "---:|" * len(measured),
        row("block runs an hour", lambda f: f"**{f['block_runs_per_hour']:,}**"),
        row("at the medians (two slots / (run + idle slot))", lambda f: f"{f['block_runs_per_hour_at_the_medians']:,}"),
        row("runs (seconds in all)", lambda f: f"{f['runs']} ({f['seconds']:g} s)"),
        row("most import runs at once", lambda f: f["max_concurrent_import_runs"]),
        row("a run, starting to success (median s)", lambda f: f"{f['median_run_seconds']:g}"),
        row("a freed slot standing empty (median s)", lambda f: f"{f['median_slot_idle_seconds']:g}"),
        row("load average (2 CPUs)", lambda f: f"{f['load_average']:.1f}"),
        "",
        "| step of a run (median seconds) | " + " | ".join(INSTANCES[section] for section in measured) + " |",
        "|---|" + "---:|" * len(measured),
        *(
            f"| {_step_label(step)} | "
            + " | ".join(f"{timelines[section].get(step, 0):g}" for section in measured)
            + " |"
            for step in steps
        ),
        "",
    ]
    if not summary["daemon_target_met"]:
        # The queue wait is the other runs' time, not this run's: the largest of a run's own steps says why.
        own = {step: seconds for step, seconds in timelines["daemon"].items() if not step.startswith("run_enqueued")}
        step, seconds = max(own.items(), key=lambda item: item[1])
        lines += [
            f"Missed by {BLOCK_RUNS_PER_HOUR_TARGET / daemon['block_runs_per_hour']:.2f}x: two slots at "
            f"{BLOCK_RUNS_PER_HOUR_TARGET:,} an hour leave each run {2 * 3600 / BLOCK_RUNS_PER_HOUR_TARGET:.1f} s. The "
            f"largest step of a run is {_step_label(step)}, {seconds:g} s: "
            f"{TIMELINE_WORK.get(step, 'see the timeline')}.",
            "",
        ]
    return lines


def _run_step(key: str) -> str:
    # Dagster's event type values keep their old names (PIPELINE_START for a run's start).
    return key.replace("pipeline_", "run_")


def _step_label(step: str) -> str:
    return step.replace("_to_", " to ").replace("_", " ")
