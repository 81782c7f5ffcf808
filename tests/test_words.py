"""Counts in messages agree with their noun."""

from nakodo_dagster.words import plural


def test_one_is_singular_and_every_other_count_plural():
    assert plural(1, "campaign") == "1 campaign"
    assert [plural(n, "campaign") for n in (0, 2)] == ["0 campaigns", "2 campaigns"]
    assert plural(1_500, "business", "businesses") == "1,500 businesses"
