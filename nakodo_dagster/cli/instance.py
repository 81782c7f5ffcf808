"""``nakodo dagster-home``: the Dagster instance prepared once, before the processes that share it start."""

from __future__ import annotations

import click

from nakodo_dagster.cli.shared import NakodoCommand, prepared_dagster_home


@click.command("dagster-home", cls=NakodoCommand)
def dagster_home() -> None:
    """Prepare the Dagster instance at DAGSTER_HOME (default data/dagster_home, with the embedded default's settings)
    and print its folder.

    Its storage is created, or brought up to date after a Dagster upgrade, by this one process. Run it before
    starting `dagster-webserver` and `dagster-daemon run` yourself on a new DAGSTER_HOME: processes that create the
    same storage at once can leave it unreadable to all of them. `make run` runs it; `dagster dev` and `dg dev`
    create the storage themselves before they start their webserver and daemon.
    """
    click.echo(f"Dagster instance ready: {prepared_dagster_home()}")
