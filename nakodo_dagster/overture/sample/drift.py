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
    share that comes back under a new id, all else the same (as when a source replaces a feature).

    As Overture's matching moves ids about (``OVERTURE_MONTH``), shares of the places kept too:

    - ``moved``: back under a new id 80 to 150 m off and spelled another way, its source record unchanged;
    - ``resourced``: back under a new id and a new source record (another dataset's), up to 120 m off, half of
      them spelled another way: only a name nearby tells it is the same business;
    - ``closed``: marked ``permanently_closed`` (half of them with confidence 0, as Overture sets);
    - ``split``: one place becomes two, both under new ids and both citing its source record: one where it was, the
      other (another business's name) 30 to 80 m off;
    - ``duplicated``: listed a second time, by another dataset, 5 to 30 m off and spelled another way;

    and ``merged``, the share of the month before's second listings merged back into the place they duplicate:
    one new id where the place was, citing both source records."""

    drop: tuple[str, ...] = ()
    inflate: tuple[str, ...] = ()
    churn: float = 0.03
    edited: float = 0.0
    reissued: float = 0.0
    moved: float = 0.0
    resourced: float = 0.0
    closed: float = 0.0
    split: float = 0.0
    duplicated: float = 0.0
    merged: float = 0.0

    def kept_shares(self) -> tuple[float, ...]:
        """The shares of the places kept that change, in the order they are drawn (each place at most one)."""
        return (self.edited, self.reissued, self.moved, self.resourced, self.closed, self.split, self.duplicated)

    def __post_init__(self) -> None:
        known = {c.primary for c in TAXONOMY}
        unknown = sorted((set(self.drop) | set(self.inflate)) - known)
        if unknown:
            raise InvalidInput(f"categories {unknown} are not in the sample's taxonomy; e.g. cafe, pub, bakery")
        if set(self.drop) & set(self.inflate):
            raise InvalidInput("a category cannot be both dropped and inflated")
        shares = ("churn", "edited", "reissued", "moved", "resourced", "closed", "split", "duplicated", "merged")
        for name in shares:
            share = getattr(self, name)
            if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share < 1:
                raise InvalidInput(f"{name} {share!r} is not allowed: use a share from 0 to under 1")
        if sum(self.kept_shares()) >= 1:
            raise InvalidInput(
                "edited, reissued, moved, resourced, closed, split and duplicated together must be under 1: they are "
                "shares of the same places"
            )


# What ReleaseDrift does to a dropped and to an inflated category.
DROPPED_KEEPS = 0.1
INFLATED_GAINS = 3


# A month of Overture's places as its matching moves ids about: a tenth of the places kept come back under new ids
# (most at the same spot, some moved and spelled another way, some citing another dataset), a few close, split or
# are listed twice, and half of last month's second listings are merged back.
OVERTURE_MONTH = ReleaseDrift(
    churn=0.03,
    edited=0.02,
    reissued=0.05,
    moved=0.03,
    resourced=0.02,
    closed=0.01,
    split=0.005,
    duplicated=0.01,
    merged=0.5,
)
