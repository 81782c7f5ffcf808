"""The drift gate: whether a pair's places from a newer release may replace the places it holds.

Plain Python, no database: the store measures each pair (``PairDrift``) and asks ``drift_reasons``; what comes
back non-empty holds the new rows back, and campaigns keep the places they have until an analyst accepts or the
next release passes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.releases import RELEASE_PATTERN

# A pair that moved by more than half (353 cafes become 12, or 4,000) is more likely a release's fault than a
# month's openings and closures; a few places either way in a small pair is noise, so pairs of fewer than 20
# places before are never held.
COUNT_CHANGE = 0.5
MIN_PLACES = 20
# Ids are Overture's stable identifiers (GERS): a month keeps most of them. Fewer than half kept is a re-keying
# or a replaced source, which would add every place to campaigns again.
MIN_KEPT = 0.5
# Places below 0.5 are left out, so confidences live in [0.5, 1]: a category whose median moves by 0.15 (junk
# places jumping from 0.64 to 0.97) has been re-scored, not re-surveyed.
CONFIDENCE_SHIFT = 0.15


@dataclass(frozen=True)
class DriftLimits:
    """Beyond which a newer release's rows for a pair are held. A limit of 0 for ``min_kept`` switches that
    measure off; the count and confidence limits are relative and absolute changes."""

    count_change: float = COUNT_CHANGE
    min_places: int = MIN_PLACES
    min_kept: float = MIN_KEPT
    confidence_shift: float = CONFIDENCE_SHIFT

    def __post_init__(self) -> None:
        for name, value, high in (
            ("count_change", self.count_change, math.inf),
            ("min_kept", self.min_kept, 1.0),
            ("confidence_shift", self.confidence_shift, 1.0),
        ):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= high:
                raise InvalidInput(f"drift limit {name} {value!r} is not allowed: use a number from 0 to {high:g}")
        if isinstance(self.min_places, bool) or not isinstance(self.min_places, int) or self.min_places < 1:
            raise InvalidInput(f"drift limit min_places {self.min_places!r} is not allowed: use a whole number >= 1")


@dataclass(frozen=True)
class PairDrift:
    """One pair's places in the release it holds (``kept_release``) against a newer ``release``'s."""

    kept_release: str
    release: str
    before: int
    after: int
    kept: int
    """Places of ``before`` whose id is among ``after``."""
    confidence_before: float | None
    """The median confidence of the places before (None: none had one)."""
    confidence_after: float | None

    @property
    def count_change(self) -> float:
        """(after - before) / before; 0 for a pair that had none."""
        return (self.after - self.before) / self.before if self.before else 0.0

    @property
    def kept_share(self) -> float:
        """The share of the places before that the new release keeps by id; 1 for a pair that had none."""
        return self.kept / self.before if self.before else 1.0

    @property
    def confidence_shift(self) -> float | None:
        """The median confidence after minus before; None when either has no confidence."""
        if self.confidence_before is None or self.confidence_after is None:
            return None
        return self.confidence_after - self.confidence_before

    def in_words(self) -> str:
        """The numbers as a sentence part: '353 -> 12 places (-97%), 3% kept by id, median confidence 0.81 -> 0.80'."""
        shift = (
            f"median confidence {self.confidence_before:.2f} -> {self.confidence_after:.2f}"
            if self.confidence_shift is not None
            else "median confidence not comparable"
        )
        return (
            f"{self.before:,} -> {self.after:,} places ({self.count_change:+.0%}), "
            f"{self.kept_share:.0%} kept by id, {shift}"
        )


def accept_command(area: str, category: str) -> str:
    """The command an analyst runs to accept a held pair."""
    return f"nakodo imports accept {area} {category}"


def release_order(name: str) -> tuple[str, int]:
    """A release name's place in time: its date, then its number (``2026-11-18.10`` after ``2026-11-18.9``)."""
    match = RELEASE_PATTERN.fullmatch(name)
    if match is None:
        raise InvalidInput(f"release {name!r} is not an Overture release name YYYY-MM-DD.N")
    return match[1], int(match[2])


def gated(release: str, held: str | None) -> bool:
    """Whether reading ``release`` into a pair holding ``held`` passes the gate: only a newer release does (a
    re-read of the same release, or an older one pinned on purpose, is taken as it is)."""
    return held is not None and release_order(release) > release_order(held)


def drift_reasons(drift: PairDrift, limits: DriftLimits) -> tuple[str, ...]:
    """Why the newer release's rows are held, one reason per measure past its limit; () lets them through.

    A pair with fewer than ``limits.min_places`` before is never held: its numbers are too small to mean much.
    """
    if drift.before < limits.min_places:
        return ()
    reasons = []
    if abs(drift.count_change) > limits.count_change:
        reasons.append(
            f"count changed by {drift.count_change:+.0%} ({drift.before:,} -> {drift.after:,}), "
            f"beyond {limits.count_change:.0%}"
        )
    if drift.kept_share < limits.min_kept:
        reasons.append(f"{drift.kept_share:.0%} of the places kept by id, under {limits.min_kept:.0%}")
    shift = drift.confidence_shift
    # Rounded: medians of 4-decimal confidences differ by float noise at the limit itself (0.95 - 0.80).
    if shift is not None and round(abs(shift), 9) > limits.confidence_shift:
        reasons.append(
            f"median confidence moved by {shift:+.2f} ({drift.confidence_before:.2f} -> "
            f"{drift.confidence_after:.2f}), beyond {limits.confidence_shift:.2f}"
        )
    return tuple(reasons)
