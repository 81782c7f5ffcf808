"""The fleet part: a new account's wait for its first businesses behind another account's backlog."""

from __future__ import annotations

from bench.report.common import measured_when, verdict

# The bound: a new campaign's first businesses within minutes, whatever another account's backlog.
FIRST_BUSINESSES_TARGET_MINUTES = 10


def sections(results: dict, summary: dict) -> list[str]:
    """The fleet's section of results.md: account B's wait against the bound and against first come, first served."""
    if "fleet" not in results:
        return []
    fleet = results["fleet"]
    met = fleet["minutes_to_b_first_businesses"] <= FIRST_BUSINESSES_TARGET_MINUTES
    return [
        f"## Fleet: a new account behind another account's backlog (measured {measured_when(results, 'fleet')})",
        "",
        f"Account A's {fleet['a_campaigns']:,} campaigns need {fleet['a_blocks']:,} block runs (the globe has 16,200 "
        "blocks: a backlog of 20,000 block runs cannot exist at once); A's first blocks have been served and "
        f"{fleet['a_backlog_when_b_added']:,} block runs are left when account B adds one 10 km campaign. The store, "
        "the admission SQL and the policy are the real ones on PostgreSQL; Dagster's queue is modelled (two slots at "
        f"{fleet['pace_block_runs_per_hour']:,g} block runs an hour, highest `dagster/priority` first) on a simulated "
        f"clock. **B's first businesses {fleet['minutes_to_b_first_businesses']:g} minutes after `campaign add`** "
        f"(target at most {FIRST_BUSINESSES_TARGET_MINUTES}: {verdict(met)}), the search's 45 s included; first "
        f"come, first served, they would have come after {fleet['minutes_first_come_first_served']:,g} minutes. The "
        f"tick that admitted B's block found every missing pair again and took {fleet['seconds_of_those_ticks']:g} s.",
        "",
    ]
