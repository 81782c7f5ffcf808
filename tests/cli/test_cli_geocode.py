"""Place names through Nominatim: the ambiguity rule, the configured server, one look-up per name ever."""

from __future__ import annotations

import socket

import pytest

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.geocode import (
    DEFAULT_NOMINATIM_URL,
    Candidate,
    GeocoderUnavailable,
    choose,
    geocode,
    nominatim,
    normalise_place_name,
)
from nakodo_dagster.store import open_store

LEEDS = Candidate("Leeds, England", 53.7997, -1.5492, 0.71)


def test_one_candidate_or_a_clear_leader_is_chosen():
    assert choose("Leeds", [LEEDS]) == LEEDS
    alabama = Candidate("Leeds, Alabama", 33.5482, -86.5444, 0.60)
    assert choose("Leeds", [alabama, LEEDS]) == LEEDS


def test_the_same_place_mapped_twice_is_not_a_rival():
    node = Candidate("Leeds (node)", 53.7965, -1.5478, 0.70)
    assert choose("Leeds", [node, LEEDS]) == LEEDS


def test_candidates_of_similar_importance_are_ambiguous_and_listed():
    alabama = Candidate("Leeds, Alabama", 33.5482, -86.5444, 0.62)
    with pytest.raises(InvalidInput, match="ambiguous") as refused:
        choose("Leeds", [LEEDS, alabama])
    assert "Leeds, England (53.7997,-1.5492); Leeds, Alabama (33.5482,-86.5444)" in str(refused.value)
    assert "--at LAT,LNG" in str(refused.value)


def test_no_candidate_is_an_unknown_name():
    with pytest.raises(InvalidInput, match="no place called 'Atlantis'"):
        choose("Atlantis", [])


@pytest.mark.parametrize("name", ["", "   ", "x" * 201, "Leeds\n", None])
def test_a_place_name_must_be_a_short_line_of_text(name):
    with pytest.raises(InvalidInput, match="place name"):
        normalise_place_name(name)


def test_the_nominatim_server_is_configurable(monkeypatch):
    monkeypatch.delenv("NAKODO_NOMINATIM_URL", raising=False)
    assert nominatim().api == f"{DEFAULT_NOMINATIM_URL}/search"
    monkeypatch.setenv("NAKODO_NOMINATIM_URL", "http://127.0.0.1:8088/nominatim/")
    assert nominatim().api == "http://127.0.0.1:8088/nominatim/search"
    for url in ("ftp://example.org", "http://x y", "127.0.0.1:8088"):
        monkeypatch.setenv("NAKODO_NOMINATIM_URL", url)
        with pytest.raises(InvalidInput, match="NAKODO_NOMINATIM_URL"):
            nominatim()


def test_a_name_is_looked_up_once_then_read_from_the_store(environment, nominatim, database_url):
    store = open_store(database_url)
    store.migrate()
    first, kept = geocode(store, "Leeds")
    assert (first.query, first.lat, first.lng, kept) == ("leeds", 53.7997, -1.5492, False)
    again, kept = geocode(open_store(database_url), " leeds  ")
    assert (again, kept) == (first, True)
    (request,) = nominatim.requests
    assert request["path"] == "/search" and request["q"] == "leeds" and request["limit"] == "5"
    assert request["user_agent"].startswith("nakodo_dagster/")


def test_an_ambiguous_or_unknown_name_is_not_kept(environment, nominatim, database_url, written):
    store = open_store(database_url)
    store.migrate()
    with pytest.raises(InvalidInput, match="Springfield, Greene County, Missouri"):
        geocode(store, "Springfield")
    with pytest.raises(InvalidInput, match="no place called"):
        geocode(store, "Atlantis")
    assert written() == {}
    assert nominatim.queries() == ["springfield", "atlantis"]


def test_an_unreachable_nominatim_exits_1_and_writes_nothing(nakodo_here, database_url, written):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    args = ["campaign", "add", "--name", "Leeds", "--near", "Leeds", "--radius-km", "10", "--category", "cafe"]
    result = nakodo_here(*args, expect=1, NAKODO_NOMINATIM_URL=f"http://127.0.0.1:{closed}")
    assert "could not be asked about 'leeds'" in result.stderr
    assert isinstance(result.exception, SystemExit) and not isinstance(result.exception, GeocoderUnavailable)
    assert written() == {}
