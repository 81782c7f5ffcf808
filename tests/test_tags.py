"""A run's campaign tag: as many names as the run list shows whole, then how many more."""

from __future__ import annotations

from nakodo_dagster import tags


def test_a_run_tag_names_every_campaign_that_fits():
    assert tags.campaign_names(["Leeds", "Paris"]) == "Leeds, Paris"


def test_a_run_tag_counts_the_campaigns_beyond_the_names_it_was_given():
    assert tags.campaign_names(["Leeds", "Paris"], count=5) == "Leeds, Paris and 3 more"


def test_a_run_tag_of_many_campaigns_stops_at_what_the_run_list_shows():
    names = [f"campaign number {number}" for number in range(40)]

    tag = tags.campaign_names(names, count=1_000)

    shown, more = tag.split(" and ")
    assert len(tag) <= 200
    assert shown.split(", ") == names[: len(shown.split(", "))]
    assert more == f"{1_000 - len(shown.split(', '))} more"
