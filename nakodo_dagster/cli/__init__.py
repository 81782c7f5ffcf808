"""``nakodo``: campaigns, headless runs of the Dagster definitions, results, the freshness table, the releases'
files, samples.

Bad input exits with code 2 and one message saying what is wrong and what is allowed, before anything is
written; a failure that is not the input's fault (a failed import run, an unreachable Nominatim) exits with 1.
"""

from __future__ import annotations

import click

from nakodo_dagster.cli import accounts, campaigns, imports, instance, overture, samples, sync
from nakodo_dagster.cli.shared import NakodoGroup

__all__ = ["main"]


@click.group(
    cls=NakodoGroup,
    commands=[
        campaigns.campaign,
        campaigns.results,
        accounts.account,
        sync.sync,
        imports.imports,
        overture.overture,
        samples.sample_release,
        samples.demo,
        instance.dagster_home,
    ],
)
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
