"""``nakodo sample-release``: write a sample Overture places release for tests, benchmarks and offline runs."""

from __future__ import annotations

from pathlib import Path

import click

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.sample import (
    DEFAULT_FILES,
    DEFAULT_RELEASE,
    DEFAULT_ROWS,
    SCHEMAS,
    ReleaseDrift,
    write_sample_release,
)


@click.command("sample-release")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option("--release", default=DEFAULT_RELEASE, show_default=True, help="Release name, YYYY-MM-DD.N.")
@click.option("--rows", type=int, default=DEFAULT_ROWS, show_default=True, help="Number of places.")
@click.option("--files", type=int, default=DEFAULT_FILES, show_default=True, help="Number of Parquet files.")
@click.option(
    "--row-group-rows", type=int, default=None, help="Places per row group [default: about 256 row groups a file]."
)
@click.option(
    "--schema",
    type=click.Choice(SCHEMAS),
    default="current",
    show_default=True,
    help="current: taxonomy and operating_status (2026-09 on); previous: categories (before 2025-09).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The same seed writes the same places.")
@click.option(
    "--drop",
    multiple=True,
    help="Write the next release after the one these options write without --drop and --inflate: this category "
    "keeps a tenth of its places (repeatable).",
)
@click.option(
    "--inflate",
    multiple=True,
    help="As --drop, but this category gains three new places for each it had (repeatable).",
)
def sample_release(
    directory: Path,
    release: str,
    rows: int,
    files: int,
    row_group_rows: int | None,
    schema: str,
    seed: int,
    drop: tuple[str, ...],
    inflate: tuple[str, ...],
) -> None:
    """Write a sample places release under DIRECTORY in Overture's layout; print the release's folder last.

    With --drop or --inflate it is the next release after the one the same options write without them: the same
    places by id, a month's churn (3% gone, as many new), and the chosen categories dropped or inflated, as a bad
    release does; for trying the drift gate."""
    try:
        drift = ReleaseDrift(drop, inflate) if drop or inflate else None
        path = write_sample_release(directory, release, rows, files, row_group_rows, schema, seed, drift=drift)
    except InvalidInput as exc:
        raise click.UsageError(str(exc)) from exc
    click.echo(str(path))
