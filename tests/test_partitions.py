"""A campaign's partition key: its id, then its name in lower-case words; the id read back from any key."""

from __future__ import annotations

import pytest

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.partitions import campaign_id_of, campaign_partition


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("Paris cafes", "12-paris-cafes"),
        ("  Leeds: cafés & pubs (2026)! ", "12-leeds-cafés-pubs-2026"),
        ("snake_case_name", "12-snake-case-name"),
        # Nothing but punctuation: the id alone.
        ("!!!", "12"),
        # A long name is cut to 40 characters, never ending on a dash.
        ("a" * 39 + " and more", "12-" + "a" * 39),
    ],
)
def test_a_campaign_key_is_its_id_then_its_name_in_words(name, key):
    assert campaign_partition(12, name) == key
    assert campaign_id_of(key) == 12


def test_a_key_that_does_not_start_with_an_id_is_refused():
    with pytest.raises(InvalidInput, match="does not start with a campaign id"):
        campaign_id_of("paris-cafes")
