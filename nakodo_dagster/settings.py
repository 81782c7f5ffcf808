"""Every setting of the code location and the command line: its environment variable and its default in code.

The defaults are the embedded data `make run` uses, in the working folder's ``data/`` (the project folder, where
`make run`, `dagster dev -w workspace.yaml` and `dg dev` start), so Dagster's own commands work from a plain shell.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nakodo_dagster.placement import IMPORT_QUEUE_MINUTES

if TYPE_CHECKING:
    import dagster as dg

DATA = Path("data")


def _default_root() -> str:
    # The SPEC's rule stands: no release folder, imports off. `make run` and `nakodo demo` write the sample one.
    root = (DATA / "overture").absolute()
    return str(root) if root.is_dir() else ""


DEFAULTS: dict[str, Callable[[], str]] = {
    "NAKODO_DATABASE": lambda: str((DATA / "nakodo.duckdb").absolute()),
    "NAKODO_OVERTURE_ROOT": _default_root,
    "NAKODO_OVERTURE_RELEASE": lambda: "",
    "NAKODO_OVERTURE_INDEX": lambda: "",
    "NAKODO_IMPORT_QUEUE_MINUTES": lambda: str(IMPORT_QUEUE_MINUTES),
}


def value(name: str) -> str:
    """The setting's value now: its environment variable if set (even empty), else its default."""
    return os.environ[name] if name in os.environ else DEFAULTS[name]()


# Settings a resource takes as whole numbers.
WHOLE_NUMBERS = frozenset({"NAKODO_IMPORT_QUEUE_MINUTES"})


def setting(name: str) -> str | int | dg.EnvVar:
    """The setting for a resource: an ``EnvVar`` when the variable is set, read when a run or a tick uses it, so
    a secret such as a PostgreSQL password never shows in the UI; else its default in code."""
    import dagster as dg

    whole = name in WHOLE_NUMBERS
    if name in os.environ:
        return dg.EnvVar.int(name) if whole else dg.EnvVar(name)
    default = DEFAULTS[name]()
    return int(default) if whole else default
