"""Which Overture releases a root holds: a local folder or an ``s3://bucket/prefix``, listed through DuckDB.

A release is a folder named ``YYYY-MM-DD.N`` holding ``theme=places/type=place/*.parquet``. Overture
publishes monthly and keeps only the last two releases online, so a configured release name goes stale.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path

import duckdb

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.duck import connect

RELEASE_PATTERN = re.compile(r"(\d{4}-\d{2}-\d{2})\.(\d+)")
PLACES_FILES = "theme=places/type=place/*.parquet"
_S3_ROOT = re.compile(r"s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9._=/-]*)?")
_GLOB_CHARACTERS = frozenset("*?[]{}")


def check_release_name(name: str) -> str:
    """The name, if it is an Overture release name ``YYYY-MM-DD.N``; InvalidInput otherwise."""
    match = RELEASE_PATTERN.fullmatch(name) if isinstance(name, str) else None
    try:
        if match:
            date.fromisoformat(match[1])
            return name
    except ValueError:
        pass
    raise InvalidInput(
        f"release {name!r} is not allowed: use an Overture release name YYYY-MM-DD.N with a real date, "
        "e.g. '2026-11-18.0'"
    )


def check_root(root: str | Path) -> str:
    """The root as an absolute folder path or an ``s3://`` prefix, without a trailing slash; InvalidInput if neither."""
    text = str(root)
    if "://" in text:
        text = text.rstrip("/")
        if not _S3_ROOT.fullmatch(text) or "//" in text.removeprefix("s3://"):
            raise InvalidInput(
                f"Overture root {text!r} is not allowed: use a local folder or s3://bucket/prefix "
                "(e.g. s3://overturemaps-us-west-2/release)"
            )
        return text
    if _GLOB_CHARACTERS & set(text):
        raise InvalidInput(f"Overture root {text!r} is not allowed: a folder path without any of * ? [ ] {{ }}")
    path = Path(text).absolute()
    if not path.is_dir():
        raise InvalidInput(f"Overture root {text!r} is not a folder: use an existing folder or an s3:// prefix")
    return str(path)


def places_glob(root: str | Path, release: str) -> str:
    """The pattern of a release's places files under the root."""
    return f"{check_root(root)}/{check_release_name(release)}/{PLACES_FILES}"


def glob_files(connection: duckdb.DuckDBPyConnection, pattern: str) -> list[str]:
    """The files a pattern matches, sorted; an S3 bucket that does not exist is InvalidInput."""
    try:
        return sorted(row[0] for row in connection.execute("SELECT file FROM glob(?)", [pattern]).fetchall())
    except duckdb.HTTPException as exc:
        if "NoSuchBucket" in str(exc):
            raise InvalidInput(f"{pattern.split('/')[2]!r} is not an S3 bucket at this endpoint: {exc}") from exc
        raise


def list_releases(root: str | Path) -> list[str]:
    """The releases under the root that hold places files, oldest first."""
    root = check_root(root)
    with connect(root) as connection:
        files = glob_files(connection, f"{root}/*/{PLACES_FILES}")
    names = {file[len(root) + 1 :].split("/", 1)[0] for file in files}
    return sorted((name for name in names if RELEASE_PATTERN.fullmatch(name)), key=_order)


def _order(release: str) -> tuple[str, int]:
    """A release name's place in time: its date, then its number that day."""
    day, number = release.split(".")
    return day, int(number)


def release_before(root: str | Path, release: str) -> str | None:
    """The release listed just before ``release`` under the root (the one its changelog compares with), or None."""
    earlier = [name for name in list_releases(root) if _order(name) < _order(release)]
    return earlier[-1] if earlier else None


def newest_release(root: str | Path) -> str:
    """The newest release under the root; InvalidInput if it holds none."""
    releases = list_releases(root)
    if not releases:
        raise InvalidInput(
            f"Overture root {str(root)!r} holds no release: expected folders named YYYY-MM-DD.N holding {PLACES_FILES}"
        )
    return releases[-1]


def resolve_release(root: str | Path, name: str | None = None) -> str:
    """The release to read: ``name`` if the root holds it, else the newest; InvalidInput if there is none."""
    if name is None:
        return newest_release(root)
    check_release_name(name)
    if name not in list_releases(root):
        raise missing_release(root, name)
    return name


def missing_release(root: str | Path, name: str) -> InvalidInput:
    """The error for a release the root does not hold, naming the releases it does hold."""
    available = ", ".join(list_releases(root)) or "none"
    return InvalidInput(
        f"release {name!r} is not under {str(root)!r}: Overture keeps only the last two releases online, "
        f"so a configured release goes stale; available here: {available}"
    )
