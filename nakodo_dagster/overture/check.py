"""Which files of a release cannot be read: each file's footer fetched and parsed as an import's index reads it, all
at once, each reported as it is done. A file cut short or not Parquet at all loses its footer; pages damaged inside a
whole file show only when a read decodes them."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from nakodo_dagster.overture.faults import first_line
from nakodo_dagster.overture.fetch import Objects, parse_footer, run_coroutine
from nakodo_dagster.overture.index import file_footer


@dataclass(frozen=True)
class FileCheck:
    """One release file: its path, and why it cannot be read (None: its footer reads)."""

    path: str
    problem: str | None


def check_command(release: str) -> str:
    """The command that names a release's unreadable files."""
    return f"nakodo overture check {release}"


def check_files(
    root: str, files: Sequence[str], checked: Callable[[FileCheck], None] = lambda _: None
) -> list[FileCheck]:
    """Each of a checked root's ``files`` read as an import's index reads it, in the files' order; ``checked`` is
    called with each as it is done."""
    return run_coroutine(_check_all(Objects(root), files, checked))


async def _check_all(source: Objects, files: Sequence[str], checked: Callable[[FileCheck], None]) -> list[FileCheck]:
    async def check(path: str) -> FileCheck:
        try:
            footer, _, _ = await file_footer(source, path)
            parse_footer(footer)
        except Exception as error:
            result = FileCheck(path, first_line(error))
        else:
            result = FileCheck(path, None)
        checked(result)
        return result

    return list(await asyncio.gather(*(check(path) for path in files)))
