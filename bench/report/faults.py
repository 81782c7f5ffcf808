"""The faults part: the fleet through its own machinery's faults, each fault's survival and recovery, and the
soak's checks of what the store holds."""

from __future__ import annotations

from bench.faults import is_plain
from bench.report.common import measured_when


def sections(results: dict, summary: dict) -> list[str]:
    """The fault soak's section of results.md: the setting, each kind of fault, the losses and the store's checks."""
    if "faults" not in results:
        return []
    soak = results["faults"]
    kinds = sorted(soak["faults_injected"])
    store = "a PostgreSQL cluster of its own" if soak.get("store") == "postgres" else "DuckDB"
    # Figures written before the soak read its release from S3 have no requests faulted.
    remote = " (read from S3 on loopback through a fault proxy)" if "requests_faulted" in soak else ""
    rows = [
        f"| {kind.replace('_', ' ')} | {soak['faults_injected'][kind]} | {soak['faults_survived'].get(kind, 0)} | "
        f"{soak['seconds_to_recover_max'].get(kind, '-')} |"
        for kind in kinds
    ]
    return [
        f"## The fleet through its own machinery's faults (measured {measured_when(results, 'faults')})",
        "",
        f"The real `dagster-daemon` with the embedded default's dagster.yaml, the store on {store}, "
        f"{soak['campaigns']} campaigns ({soak['pairs_needed']} pairs) over the sample release{remote}, faults on a "
        f"schedule of seed {soak['seed']} "
        "(`python -m bench.faults --seed N` replays it). Survived: the pairs the fault hit landed (the daemon's: those "
        "of the imports in flight when it was killed; a killed worker's or a cancelled run's: its own; the store "
        "stopped and a burst of the object store's faults: those in flight or started while it lasted), timed from "
        "the fault to the last of them; a paused campaign: resumed.",
        "",
        "| fault | injected | survived | longest to recover (s) |",
        "|---|---|---|---|",
        *rows,
        "",
        f"Pairs lost: **{soak['pairs_lost']}**; marked failed: {soak['pairs_marked_failed']}; marks without a run: "
        f"{soak['orphan_marks']}; pairs imported by two runs at once: {soak['pairs_imported_by_two_runs_at_once']}; "
        f"most import runs at once: {soak['max_import_runs_at_once']}; slots held by runs that ended: "
        f"{soak['slots_held_by_ended_runs']}. {soak['import_runs']} import runs ({soak['import_runs_retried']} "
        f"retried, {soak['import_runs_cancelled']} cancelled); the longest a campaign waited for its first "
        f"businesses: {soak['longest_wait_for_first_businesses_seconds']:,.0f} s; all landed in "
        f"{soak['seconds']:,.0f} s.",
        "",
        *_check_lines(soak),
    ]


def _check_lines(soak: dict) -> list[str]:
    """The soak's checks of what the store holds, in a results file written before it had them: none."""
    if "invariants_broken" not in soak:
        return []
    businesses, coverage = soak["campaign_businesses"], soak["coverage_counts"]
    headlines = soak["failed_import_runs"].values()
    counts = "equal" if coverage["kept"] == coverage["recounted"] else "differ"
    return [
        f"Kept coverage counts against a full recount: {counts} "
        f"({coverage['kept']['fresh']} fresh). {businesses.get('businesses', 0):,} businesses of "
        f"{businesses.get('campaigns', 0)} campaigns against an independent reading of the release: "
        f"{businesses.get('businesses_missing', 0)} missing, {businesses.get('businesses_not_expected', 0)} not "
        f"expected, {businesses.get('businesses_held_twice', 0)} held twice. {len(headlines)} failed import runs, "
        f"{sum(not is_plain(headline) for headline in headlines)} without a plain one-line headline. Invariants "
        f"broken: **{len(soak['invariants_broken'])}**.",
        "",
    ]
