"""Plans and their limits: how much one account's active campaigns may ask for together.

Pure arithmetic over area keys (``placement.areas_for``'s keys): no database, no files, no clock. A plan bounds
an account's active campaigns, the distinct areas they need merged (a cell two campaigns share counts once) and
the countries among those areas. The plans themselves are data (``data/plans.toml``), read by ``plan_config``.
"""

from __future__ import annotations

import re
import tomllib
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import Location, PointLocation

COUNTRY_PREFIX = "country:"
PLAN_NAME = re.compile(r"[a-z][a-z0-9_-]{0,31}")
# Each limit a plan may set: its key in a plans file (and field of Plan and Usage), and its noun, one and many.
LIMITS = (
    ("campaigns", "active campaign", "active campaigns"),
    ("areas", "area", "areas"),
    ("countries", "country", "countries"),
)
_PLAN_SHAPE = (
    "each plan is a table of whole numbers, 0 or more, e.g. [free] campaigns = 1, areas = 25, countries = 0; "
    "a limit left out is no limit"
)


def _noun(kind: str, count: int) -> str:
    _, one, many = next(limit for limit in LIMITS if limit[0] == kind)
    return one if count == 1 else many


@dataclass(frozen=True)
class Usage:
    """What an account's active campaigns hold: how many there are, their distinct areas, the countries among them."""

    campaigns: int
    areas: int
    countries: int


@dataclass(frozen=True)
class Plan:
    """A plan's limits on an account's active campaigns; None is no limit."""

    name: str
    campaigns: int | None = None
    areas: int | None = None
    countries: int | None = None

    @property
    def limits_nothing(self) -> bool:
        return all(getattr(self, kind) is None for kind, _, _ in LIMITS)

    def left(self, usage: Usage) -> dict[str, int | None]:
        """Per limit, how much more the account may take (never below 0); None where the plan sets no limit."""
        limits = {kind: getattr(self, kind) for kind, _, _ in LIMITS}
        return {kind: None if limit is None else max(0, limit - getattr(usage, kind)) for kind, limit in limits.items()}

    def describe(self) -> str:
        """``1 active campaign, 25 areas, 0 countries``; ``no limits`` for a plan that sets none."""
        if self.limits_nothing:
            return "no limits"
        return ", ".join(
            f"{limit:,} {_noun(kind, limit)}" if (limit := getattr(self, kind)) is not None else f"any number of {many}"
            for kind, _, many in LIMITS
        )


@dataclass(frozen=True)
class Holding:
    """An account's active campaigns and the areas they need, merged."""

    campaigns: int
    areas: frozenset[str]

    @classmethod
    def of(cls, areas_by_campaign: Mapping[int, Iterable[str]]) -> Holding:
        return cls(len(areas_by_campaign), frozenset(area for areas in areas_by_campaign.values() for area in areas))

    @property
    def usage(self) -> Usage:
        return Usage(self.campaigns, len(self.areas), sum(area.startswith(COUNTRY_PREFIX) for area in self.areas))

    def adding(self, areas: Iterable[str], *, new_campaign: bool) -> Holding:
        """What the account holds once ``areas`` (and, if ``new_campaign``, one more active campaign) are added."""
        return Holding(self.campaigns + int(new_campaign), self.areas | frozenset(areas))


def locations_in_words(locations: Sequence[Location]) -> str:
    """``a 200 km circle``, ``a 25 km circle and FR``: what a campaign or a location asks for, briefly."""
    words = [
        f"a {location.radius_km} km circle" if isinstance(location, PointLocation) else location.country_code
        for location in locations
    ]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def refusal(
    plan: Plan,
    held: Holding,
    areas: Iterable[str],
    *,
    new_campaign: bool,
    subject: str,
    what: str,
    campaign_plans: Sequence[str] = (),
) -> str | None:
    """Why adding ``areas`` (and, if ``new_campaign``, one more active campaign) would take an account holding
    ``held`` past its plan, or None if it fits. A plan that holds no campaign at all says so, naming
    ``campaign_plans``, the plans that do.

    ``subject`` names what is added (``this campaign``, ``this location``) and ``what`` says what it asks for
    (``locations_in_words``). A limit is only held against what would grow: a location whose cells the account
    holds already is welcome even where a lowered limit is exceeded.
    """
    if new_campaign and plan.campaigns == 0:
        return (
            f"plan {plan.name} holds no campaign: business outreach is on the paid plans "
            f"({', '.join(campaign_plans)}); `nakodo account set-plan ID PLAN` moves the account to one"
        )
    wanted = frozenset(areas)
    new_areas = wanted - held.areas
    new_countries = sorted(area.removeprefix(COUNTRY_PREFIX) for area in new_areas if area.startswith(COUNTRY_PREFIX))
    before = held.usage
    held_already = len(wanted) - len(new_areas)
    shared = f"; {held_already:,} of its {len(wanted):,} areas are held already" if held_already else ""
    needs = {
        "campaigns": (int(new_campaign), ""),
        "areas": (len(new_areas), f" ({what}{shared})"),
        "countries": (len(new_countries), f" ({', '.join(new_countries)})" if new_countries else ""),
    }
    reasons = []
    for kind, _, _ in LIMITS:
        limit, (needed, detail) = getattr(plan, kind), needs[kind]
        if limit is None or not needed or getattr(before, kind) + needed <= limit:
            continue
        left = max(0, limit - getattr(before, kind))
        reasons.append(
            f"plan {plan.name} allows {limit:,} {_noun(kind, limit)}; {subject} needs {needed:,}{detail}, "
            f"{left:,} {'is' if left == 1 else 'are'} left"
        )
    return "; ".join(reasons) or None


def _over(plan: Plan, usage: Usage) -> str | None:
    """The limits ``usage`` exceeds, as ``1 active campaign (the account had 3) and 25 areas (...)``, or None."""
    over = [
        f"{limit:,} {_noun(kind, limit)} (the account had {used:,})"
        for kind, _, _ in LIMITS
        if (limit := getattr(plan, kind)) is not None and (used := getattr(usage, kind)) > limit
    ]
    return " and ".join(over) or None


def campaigns_to_pause(plan: Plan, areas_by_campaign: Mapping[int, Iterable[str]]) -> dict[int, str]:
    """The active campaigns to pause when an account moves to ``plan``: the newest (highest id) first, until the
    rest fits. Each comes with the limits the account exceeded when it was paused, for the campaign's reason."""
    areas = {campaign_id: set(keys) for campaign_id, keys in areas_by_campaign.items()}
    # How many of the remaining campaigns need each area: an area leaves the holding with its last campaign.
    holders = Counter(area for keys in areas.values() for area in keys)
    remaining = len(areas)
    paused: dict[int, str] = {}
    for campaign_id in sorted(areas, reverse=True):
        countries = sum(area.startswith(COUNTRY_PREFIX) for area in holders)
        over = _over(plan, Usage(remaining, len(holders), countries))
        if over is None:
            break
        paused[campaign_id] = over
        remaining -= 1
        holders.subtract(areas[campaign_id])
        holders = +holders
    return paused


def parse_plans(text: str, source: str) -> dict[str, Plan]:
    """The plans a plans file defines (TOML, one table per plan); InvalidInput naming ``source`` and what is wrong."""

    def invalid(what: str) -> InvalidInput:
        return InvalidInput(f"plans file {source} is not valid: {what}")

    try:
        tables = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise invalid(f"it is not TOML ({exc}); {_PLAN_SHAPE}") from exc
    if not tables:
        raise invalid(f"it defines no plan; {_PLAN_SHAPE}")
    allowed = [kind for kind, _, _ in LIMITS]
    plans: dict[str, Plan] = {}
    for name, limits in tables.items():
        if not PLAN_NAME.fullmatch(name):
            raise invalid(f"plan name {name!r} is not allowed: use 1 to 32 of a-z, 0-9, _ and -, a letter first")
        if not isinstance(limits, dict):
            raise invalid(f"plan {name!r} is not a table; {_PLAN_SHAPE}")
        for kind, value in limits.items():
            if kind not in allowed:
                raise invalid(f"plan {name!r} sets {kind!r}, which is not a limit; allowed: {', '.join(allowed)}")
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise invalid(f"plan {name!r} sets {kind} = {value!r}; {_PLAN_SHAPE}")
        plans[name] = Plan(name, **limits)
    return plans
