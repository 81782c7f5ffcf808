"""Every setting of the code location and the command line: its environment variable and its default in code.

The defaults are the embedded data `make run` uses, in the working folder's ``data/`` (the project folder, where
`make run`, `dagster dev -w workspace.yaml` and `dg dev` start), so Dagster's own commands work from a plain shell.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from nakodo_dagster import drift
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.pacing import IMPORT_QUEUE_MINUTES

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
    "NAKODO_OVERTURE_CHANGELOG": lambda: "",
    "NAKODO_IMPORT_QUEUE_MINUTES": lambda: str(IMPORT_QUEUE_MINUTES),
    "NAKODO_DRIFT_COUNT_CHANGE": lambda: str(drift.COUNT_CHANGE),
    "NAKODO_DRIFT_MIN_PLACES": lambda: str(drift.MIN_PLACES),
    "NAKODO_DRIFT_MIN_KEPT": lambda: str(drift.MIN_KEPT),
    "NAKODO_DRIFT_CONFIDENCE_SHIFT": lambda: str(drift.CONFIDENCE_SHIFT),
}


def configured(name: str) -> str | None:
    """The variable's value if it is set, even empty (an empty value is a value, not the default); None if unset.
    The settings below and the command line read the environment by this rule."""
    return os.environ.get(name)


def value(name: str) -> str:
    """The setting's value now: its environment variable if set (even empty), else its default."""
    given = configured(name)
    return DEFAULTS[name]() if given is None else given


# Settings a resource takes as whole numbers.
WHOLE_NUMBERS = frozenset({"NAKODO_IMPORT_QUEUE_MINUTES"})


def setting(name: str) -> str | int | dg.EnvVar:
    """The setting for a resource: an ``EnvVar`` when the variable is set, read when a run or a tick uses it, so
    a secret such as a PostgreSQL password never shows in the UI; else its default in code."""
    import dagster as dg

    whole = name in WHOLE_NUMBERS
    if configured(name) is not None:
        return dg.EnvVar.int(name) if whole else dg.EnvVar(name)
    default = DEFAULTS[name]()
    return int(default) if whole else default


# The drift gate's limits, each DriftLimits field by its variable.
_DRIFT_SETTINGS = (
    ("count_change", "NAKODO_DRIFT_COUNT_CHANGE", float),
    ("min_places", "NAKODO_DRIFT_MIN_PLACES", int),
    ("min_kept", "NAKODO_DRIFT_MIN_KEPT", float),
    ("confidence_shift", "NAKODO_DRIFT_CONFIDENCE_SHIFT", float),
)


def drift_limits() -> drift.DriftLimits:
    """The drift gate's limits now, read when an import runs (so a changed variable takes effect on the next run);
    InvalidInput names a variable that is not a number."""
    limits = {}
    for field, name, kind in _DRIFT_SETTINGS:
        text = value(name).strip()
        try:
            limits[field] = kind(text)
        except ValueError:
            raise InvalidInput(f"{name}={text!r} is not allowed: use a number, e.g. {DEFAULTS[name]()}") from None
    return drift.DriftLimits(**limits)
