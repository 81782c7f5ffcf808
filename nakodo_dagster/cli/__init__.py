"""``nakodo``: campaigns, headless runs of the Dagster definitions, results, the freshness table, the releases'
files, samples.

Bad input exits with code 2 and one message saying what is wrong and what is allowed, before anything is
written; a failure that is not the input's fault (a failed import run, an unreachable Nominatim) exits with 1.
"""

from __future__ import annotations

import importlib

import click

from nakodo_dagster.cli.shared import NakodoGroup

__all__ = ["main"]

# Each command's module is imported when the command is run (or help lists it): a campaign's command then loads
# neither Dagster nor geopandas, seconds of a short command's start.
_COMMANDS = {
    "account": "accounts:account",
    "campaign": "campaigns:campaign",
    "dagster-home": "instance:dagster_home",
    "demo": "samples:demo",
    "imports": "imports:imports",
    "overture": "overture:overture",
    "results": "campaigns:results",
    "sample-release": "samples:sample_release",
    "sync": "sync:sync",
}


class _CommandsOnDemand(NakodoGroup):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in _COMMANDS:
            return None
        module, name = _COMMANDS[cmd_name].split(":")
        return getattr(importlib.import_module(f"nakodo_dagster.cli.{module}"), name)


@click.group(cls=_CommandsOnDemand)
def main() -> None:
    """Business listings from Overture Maps for outreach campaigns.

    Configured by NAKODO_DATABASE (a DuckDB file or a postgresql:// URL; default data/nakodo.duckdb),
    NAKODO_OVERTURE_ROOT (a folder or an s3:// prefix of releases; unset: imports off),
    NAKODO_OVERTURE_RELEASE (default: the newest), NAKODO_OVERTURE_INDEX (the release indexes' folder;
    default: beside a DuckDB store, else the user's cache), NAKODO_OVERTURE_CHANGELOG (the releases' changelogs;
    default: the folder changelog beside the root), AWS_ENDPOINT_URL (an S3-compatible endpoint),
    NAKODO_NOMINATIM_URL (default: OpenStreetMap's public Nominatim) and NAKODO_PLANS (a plans file replacing
    the shipped plans).
    """
