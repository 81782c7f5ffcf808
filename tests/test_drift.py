"""The drift gate's policy as data: no database, no Dagster."""

from __future__ import annotations

import pytest

from nakodo_dagster import settings
from nakodo_dagster.drift import DriftLimits, PairDrift, drift_reasons, gated, release_order
from nakodo_dagster.errors import InvalidInput

LIMITS = DriftLimits()


def drift(before: int, after: int, kept: int | None = None, confidence=(0.8, 0.8)) -> PairDrift:
    kept = min(before, after) if kept is None else kept
    return PairDrift("2026-10-15.0", "2026-11-18.0", before, after, kept, *confidence)


def test_the_defaults_are_the_documented_ones():
    assert DriftLimits(count_change=0.5, min_places=20, min_kept=0.5, confidence_shift=0.15) == LIMITS


@pytest.mark.parametrize(
    ("before", "after", "held"),
    [
        (353, 12, True),  # a category dropped
        (353, 4_000, True),  # a category inflated
        (20, 30, False),  # +50%: the limit itself passes
        (20, 31, True),
        (20, 10, False),  # -50%
        (20, 9, True),
        (19, 0, False),  # too few before to judge
        (0, 500, False),  # nothing before: a first import is never held
    ],
)
def test_the_count_limit(before, after, held):
    reasons = drift_reasons(drift(before, after), LIMITS)
    assert bool(reasons) is held
    assert not reasons or reasons[0].startswith("count changed by")


def test_places_kept_by_id():
    # The same number of places, but 9 of every 10 ids new: a re-keying, held.
    (reason,) = drift_reasons(drift(100, 100, kept=10), LIMITS)
    assert reason == "10% of the places kept by id, under 50%"
    assert drift_reasons(drift(100, 100, kept=50), LIMITS) == ()
    # 0 switches the measure off.
    assert drift_reasons(drift(100, 100, kept=0), DriftLimits(min_kept=0)) == ()


def test_the_median_confidence_shift():
    (reason,) = drift_reasons(drift(100, 100, confidence=(0.64, 0.97)), LIMITS)
    assert reason == "median confidence moved by +0.33 (0.64 -> 0.97), beyond 0.15"
    # The limit itself passes, float noise or not (0.95 - 0.80 is 0.15000000000000002).
    assert drift_reasons(drift(100, 100, confidence=(0.80, 0.95)), LIMITS) == ()
    assert drift_reasons(drift(100, 100, confidence=(0.80, None)), LIMITS) == ()


def test_every_measure_past_its_limit_is_a_reason():
    reasons = drift_reasons(drift(353, 12, kept=3, confidence=(0.64, 0.97)), LIMITS)
    assert [r.split()[0] for r in reasons] == ["count", "1%", "median"]


def test_in_words():
    assert drift(353, 12, kept=3, confidence=(0.81, 0.8)).in_words() == (
        "353 -> 12 places (-97%), 1% kept by id, median confidence 0.81 -> 0.80"
    )


def test_only_a_newer_release_is_gated():
    assert gated("2026-11-18.0", "2026-10-15.0")
    assert gated("2026-11-18.10", "2026-11-18.9")
    assert not gated("2026-11-18.0", "2026-11-18.0")
    assert not gated("2026-10-15.0", "2026-11-18.0")
    assert not gated("2026-11-18.0", None)
    assert release_order("2026-11-18.10") == ("2026-11-18", 10)
    with pytest.raises(InvalidInput):
        release_order("latest")


@pytest.mark.parametrize(
    "limits",
    [{"count_change": -0.1}, {"min_kept": 1.5}, {"confidence_shift": "0.1"}, {"min_places": 0}, {"min_places": 2.5}],
)
def test_limits_that_cannot_be_right_are_refused(limits):
    with pytest.raises(InvalidInput, match="drift limit"):
        DriftLimits(**limits)


def test_the_limits_from_the_environment(monkeypatch):
    assert settings.drift_limits() == LIMITS
    monkeypatch.setenv("NAKODO_DRIFT_COUNT_CHANGE", "0.25")
    monkeypatch.setenv("NAKODO_DRIFT_MIN_PLACES", "50")
    assert settings.drift_limits() == DriftLimits(count_change=0.25, min_places=50)
    monkeypatch.setenv("NAKODO_DRIFT_MIN_KEPT", "half")
    with pytest.raises(InvalidInput, match="NAKODO_DRIFT_MIN_KEPT='half' is not allowed"):
        settings.drift_limits()
