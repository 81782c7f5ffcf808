"""``nakodo overture``: the releases imports read, looked at directly."""

from __future__ import annotations

import sys

import click
from tqdm import tqdm

from nakodo_dagster import settings
from nakodo_dagster.cli.shared import NakodoGroup
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.check import check_files
from nakodo_dagster.overture.index import release_files
from nakodo_dagster.overture.releases import check_root, resolve_release
from nakodo_dagster.resources.overture import OFF_REASON
from nakodo_dagster.words import plural


@click.group(cls=NakodoGroup)
def overture() -> None:
    """The Overture releases under NAKODO_OVERTURE_ROOT."""


@overture.command("check")
@click.argument("release", required=False)
def overture_check(release: str | None) -> None:
    """Read the footer of every places file of RELEASE (default: NAKODO_OVERTURE_RELEASE, else the newest) as an
    import reads it, and name the files that cannot be read: cut short, or not Parquet. Exits 1 if any cannot.

    Run it after replacing a file an import failed on, before `nakodo imports retry`."""
    root = settings.value("NAKODO_OVERTURE_ROOT").strip()
    if not root:
        raise InvalidInput(f"{OFF_REASON}: set it to the folder or s3:// prefix the releases are under")
    root = check_root(root)
    release = resolve_release(root, release or settings.value("NAKODO_OVERTURE_RELEASE").strip() or None)
    files = release_files(root, release)
    with tqdm(total=len(files), unit=" files", desc=f"checking {release}", file=sys.stderr, disable=None) as bar:
        checks = check_files(root, files, lambda _: bar.update())
    unreadable = [check for check in checks if check.problem]
    for check in unreadable:
        # The reader's errors name the file already.
        click.echo(f"unreadable: {check.problem if check.path in check.problem else f'{check.path}: {check.problem}'}")
    if unreadable:
        replace = "it with a whole copy" if len(unreadable) == 1 else "them with whole copies"
        raise click.ClickException(
            f"{plural(len(unreadable), 'file')} of {len(files)} of release {release} cannot be read: replace "
            f"{replace} and check again."
        )
    click.echo(f"Release {release}: all {plural(len(files), 'file')} under {root} read.")
