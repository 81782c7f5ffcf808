"""The fault soak, ``python -m bench.faults`` (what it runs, injects and checks: its help, in ``__main__``), by concern:
``fleet`` (the daemon and its code server, the webserver, the PostgreSQL cluster, the loopback S3 server behind the
fault proxy), ``inject`` (the kinds of fault and how each is made), ``recovery`` (when the fleet came back from one),
``runs`` (the instance's import runs), ``checks`` (the figures and invariants read at the end) and ``soak`` (the run
itself). What the tests, ``python -m bench`` and its report use is importable from here."""

from bench.faults.checks import (
    broken_invariants,
    campaign_mismatches,
    coverage_against_recount,
    failed_run_headlines,
    is_plain,
    needed_pairs,
)
from bench.faults.fleet import daemon_home
from bench.faults.runs import FINISHED, import_runs, run_pairs, slots_held_by_ended_runs
from bench.faults.soak import measure_faults

__all__ = [
    "FINISHED",
    "broken_invariants",
    "campaign_mismatches",
    "coverage_against_recount",
    "daemon_home",
    "failed_run_headlines",
    "import_runs",
    "is_plain",
    "measure_faults",
    "needed_pairs",
    "run_pairs",
    "slots_held_by_ended_runs",
]
