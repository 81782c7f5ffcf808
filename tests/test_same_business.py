"""The name rule for a reissued id, as pure functions: names folded as compared, similar by the documented measure,
and each gone place linked to its best arrival only where the arrival's best is that place."""

from __future__ import annotations

import itertools

import pytest

from nakodo_dagster.same_business import (
    REISSUE_METRES,
    Candidate,
    name_key,
    name_links,
    name_similarity,
    similar_names,
)


def test_a_name_is_compared_without_case_accents_spaces_or_punctuation():
    assert name_key("Café  de Flore!") == name_key("CAFE DE FLORE") == "cafedeflore"
    assert name_key("Stübli") == "stubli"
    # Any script keeps its letters: a Japanese name is not an empty one.
    assert name_key("すし 銀座") == "すし銀座"
    assert name_key(None) == ""


@pytest.mark.parametrize(
    ("first", "second", "similar"),
    [
        ("Golden Bakery", "Golden Bakrey", True),  # two edits in twelve
        ("Golden Bakery", "GOLDEN BAKERY", True),
        ("Starbucks", "Starbucks Pearl St", True),  # one inside the other
        ("Bar", "Bar Italia", False),  # too short to tell inside another
        ("Golden Bakery", "Little Bakery", False),
        ("Corner Café", "", False),
    ],
)
def test_names_are_similar_by_the_documented_rule(first, second, similar):
    assert similar_names(name_key(first), name_key(second)) is similar


def test_similarity_is_one_less_the_edits_over_the_longer_length():
    assert name_similarity("goldenbakery", "goldenbakrey") == pytest.approx(1 - 2 / 12)
    assert name_similarity("", "") == 1.0


def _candidate(old: str, new: str, metres: float, old_name: str, new_name: str) -> Candidate:
    return Candidate("cell:48.5,2", "cafe", old, new, metres, old_name, new_name)


def test_two_shops_of_one_chain_pair_up_one_to_one_whatever_the_order():
    candidates = [
        _candidate("s1", "s2", 2.0, "Starbucks", "Starbucks"),
        _candidate("s1", "t2", 31.0, "Starbucks", "Starbucks"),
        _candidate("t1", "s2", 28.0, "Starbucks", "Starbucks"),
        _candidate("t1", "t2", 1.0, "Starbucks", "Starbucks"),
    ]
    for order in itertools.permutations(candidates):
        assert [(c.old_id, c.new_id) for c in name_links(order)] == [("s1", "s2"), ("t1", "t2")]


def test_the_more_similar_name_wins_over_the_nearer_one_and_reach_is_kept():
    candidates = [
        _candidate("a", "near", 20.0, "Golden Bakery", "Golden Bakers"),
        _candidate("a", "far", 150.0, "Golden Bakery", "GOLDEN BAKERY"),
        _candidate("b", "beyond", REISSUE_METRES + 1, "Blue Door Café", "Blue Door Café"),
    ]
    assert [(c.old_id, c.new_id) for c in name_links(candidates)] == [("a", "far")]
