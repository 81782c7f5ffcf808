"""The plans in force: the package's ``data/plans.toml``, or the file NAKODO_PLANS names instead.

Read at every call, never at import: a changed file applies to the next command or sensor tick, and a bad one
fails what needs it with one message naming the file, not the whole code location.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.plans import Plan, parse_plans

PLANS_VARIABLE = "NAKODO_PLANS"
PACKAGE_PLANS = "data/plans.toml"


def _override() -> str:
    """The plans file NAKODO_PLANS names, or "" for the package's."""
    return os.environ.get(PLANS_VARIABLE, "").strip()


def configured_plans() -> dict[str, Plan]:
    """Every plan by name, from NAKODO_PLANS's file if it names one, else from the package."""
    override = _override()
    if not override:
        text = files("nakodo_dagster").joinpath(PACKAGE_PLANS).read_text(encoding="utf-8")
        return parse_plans(text, f"nakodo_dagster/{PACKAGE_PLANS}")
    source = f"{override} (named by {PLANS_VARIABLE})"
    try:
        text = Path(override).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"plans file {source} cannot be read: {exc}") from exc
    return parse_plans(text, source)


def plan_named(name: object) -> Plan:
    """The plan called ``name``; InvalidInput listing the plans there are if there is none."""
    plans = configured_plans()
    if isinstance(name, str) and name in plans:
        return plans[name]
    origin = f" in {override} (named by {PLANS_VARIABLE})" if (override := _override()) else ""
    raise InvalidInput(f"plan {name!r} is not known{origin}; allowed: {', '.join(plans)}")
