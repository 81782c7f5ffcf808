"""How a next release differs from the one before it: ``ReleaseDrift``."""

from __future__ import annotations

from dataclasses import dataclass

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.sample.tables import TAXONOMY


@dataclass(frozen=True)
class ReleaseDrift:
    """How a next release differs from the one the same rows and seed write without it: a month's churn (a share
    of the places gone, as many new ones), and what a bad release does to whole categories: ``drop`` keeps a
    tenth of each one's places, ``inflate`` adds three new places for each one it had. Of the places kept,
    ``edited`` is the share whose name and confidence change (a new version under the same id), ``reissued`` the
    share that comes back under a new id, all else the same (as when a source replaces a feature)."""

    drop: tuple[str, ...] = ()
    inflate: tuple[str, ...] = ()
    churn: float = 0.03
    edited: float = 0.0
    reissued: float = 0.0

    def __post_init__(self) -> None:
        known = {c.primary for c in TAXONOMY}
        unknown = sorted((set(self.drop) | set(self.inflate)) - known)
        if unknown:
            raise InvalidInput(f"categories {unknown} are not in the sample's taxonomy; e.g. cafe, pub, bakery")
        if set(self.drop) & set(self.inflate):
            raise InvalidInput("a category cannot be both dropped and inflated")
        for name in ("churn", "edited", "reissued"):
            share = getattr(self, name)
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share < 1:
                raise InvalidInput(f"{name} {share!r} is not allowed: use a share from 0 to under 1")
        if self.edited + self.reissued >= 1:
            raise InvalidInput("edited and reissued together must be under 1: they are shares of the same places")


# What ReleaseDrift does to a dropped and to an inflated category.
DROPPED_KEEPS = 0.1
INFLATED_GAINS = 3
