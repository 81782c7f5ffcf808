"""Many campaigns added at once (``Store.add_campaigns``): all or none, each checked as one is, on both backends."""

from __future__ import annotations

from collections import Counter

import pytest
from store_helpers import query

from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting, areas_for
from nakodo_dagster.plan_config import plan_named
from nakodo_dagster.store import DEFAULT_ACCOUNT_ID, CampaignsRefused, NewCampaign, Store, targeting_to_json
from nakodo_dagster.store.campaigns import CAMPAIGN_TABLES


def around(lat: float, lng: float, radius_km: int = 50, *categories: str) -> Targeting:
    return Targeting((PointLocation(lat, lng, radius_km),), categories or ("cafe",))


def kept(store: Store) -> dict[str, int]:
    """Rows of every table a campaign's creation writes."""
    return {table: query(store, f"SELECT count(*) FROM {table}")[0][0] for table in CAMPAIGN_TABLES}


def assert_needs_kept(store: Store) -> None:
    """Each active campaign keeps placement's areas, and needed_pairs counts each pair's active campaigns."""
    active = store.campaigns(active_only=True)
    pairs = Counter(
        (a, c) for campaign in active for a in areas_for(campaign.targeting) for c in campaign.targeting.categories
    )
    kept_areas = query(store, "SELECT campaign_id, area FROM campaign_areas")
    assert sorted(kept_areas) == sorted((c.id, a) for c in store.campaigns() for a in areas_for(c.targeting))
    needed = query(store, "SELECT area, category, campaigns FROM needed_pairs WHERE campaigns > 0")
    assert {(area, category): n for area, category, n in needed} == dict(pairs)
    assert query(store, "SELECT pairs FROM coverage_counts WHERE state = 'needed'") == [(len(pairs),)]


def test_campaigns_added_together_come_in_order_and_keep_what_each_needs(store):
    acme = store.add_account("Acme", "pro")
    # Already needed: the new campaigns' shared pairs are counted on top of it, and only new pairs turn needed.
    first = store.add_campaign("Leeds", around(53.8, -1.55, 25, "cafe", "pub"))
    new = [
        NewCampaign("Leeds again", DEFAULT_ACCOUNT_ID, around(53.8, -1.55, 50, "pub", "bakery")),
        NewCampaign("Two places", acme, Targeting((PointLocation(53.4, -2.2, 10), CountryLocation("BE")), ("cafe",))),
        NewCampaign("Leeds", acme, around(53.9, -1.5, 100, "cafe")),
    ]
    written: list[int] = []

    ids = store.add_campaigns(new, written=written.append)

    assert ids == sorted(ids) and ids[0] > first
    assert written == [3], "one batch"
    assert [(c.id, c.name, c.account_id, c.targeting) for c in store.campaigns()][1:] == [
        (i, c.name, c.account_id, c.targeting) for i, c in zip(ids, new, strict=True)
    ]
    assert_needs_kept(store)
    assert query(store, "SELECT count(*) FROM progress_due WHERE campaign_id >= $first", first=ids[0]) == [(3,)]


def test_many_campaigns_are_written_in_batches_and_paused_as_any(store, monkeypatch):
    monkeypatch.setattr("nakodo_dagster.store.campaigns.WRITE_BATCH", 4)
    written: list[int] = []
    new = [NewCampaign(f"c{i}", DEFAULT_ACCOUNT_ID, around(40 + i / 4, i / 4, 25)) for i in range(10)]

    ids = store.add_campaigns(new, written=written.append)

    assert written == [4, 4, 2]
    assert len(ids) == 10
    assert_needs_kept(store)
    for campaign_id in ids[::3]:
        store.set_campaign_status(campaign_id, "paused")
    assert_needs_kept(store)


def test_refused_campaigns_are_named_by_their_place_and_nothing_is_written(store):
    starter = store.add_account("Acme", "starter")
    free = store.add_account("Free", "free")
    store.add_campaign("France", Targeting((CountryLocation("FR"),), ("cafe",)), account_id=starter)
    before = kept(store)
    new = [
        NewCampaign("fits", starter, around(50, 0, 10)),
        NewCampaign("a second country", starter, Targeting((CountryLocation("DE"),), ("cafe",))),
        NewCampaign("nobody's", 99, around(50, 0, 10)),
        NewCampaign("free", free, around(50, 0, 10)),
        NewCampaign("fits too", DEFAULT_ACCOUNT_ID, around(50, 0, 200)),
        *(NewCampaign(f"starter {n}", starter, around(40, n, 10)) for n in range(4)),
    ]

    with pytest.raises(CampaignsRefused) as refused:
        store.add_campaigns(new)

    suffix = f" (account {starter}, 'Acme'; `nakodo account show {starter}`)"
    assert refused.value.refusals == {
        1: f"plan starter allows 1 country; this campaign needs 1 (DE), 0 are left{suffix}",
        2: "account 99 does not exist; `nakodo account list` shows the accounts",
        3: "plan free holds no campaign: business outreach is on the paid plans (starter, pro, unlimited); "
        f"`nakodo account set-plan ID PLAN` moves the account to one (account {free}, 'Free'; "
        f"`nakodo account show {free}`)",
        # The account had 1, the file's first and three more fit in 5.
        8: f"plan starter allows 5 active campaigns; this campaign needs 1, 0 are left{suffix}",
    }
    assert kept(store) == before
    with pytest.raises(CampaignsRefused):
        store.add_campaigns(new, check_only=True)
    assert store.add_campaigns([new[0], new[4]], check_only=True) == []
    assert kept(store) == before


# Processes adding to one starter account (5 campaigns) at the same moment, over shared pairs: two import three
# campaigns each, four add one each. Each import lands whole or not at all, and none deadlocks with the others.
def test_imports_and_adds_racing_on_one_account_never_pass_its_plan(store, database_url, workers):
    acme = store.add_account("Acme", "starter")
    plan = plan_named("starter")

    def campaign(number: int) -> dict:
        targeting = around(50 + number / 10, number / 10, 25, "cafe", "pub")
        return {"name": f"campaign {number}", "account_id": acme, "targeting": targeting_to_json(targeting)}

    imports = [{"campaigns": [campaign(10 * i + n) for n in range(3)]} for i in range(2)]
    adds = [campaign(100 + n) for n in range(4)]
    processes = workers.start("add-campaigns", database_url, imports) + workers.start(
        "add-campaign", database_url, adds
    )
    workers.go(processes)
    results = workers.results(processes)

    imported = [r["ids"] for r in results[:2] if "ids" in r]
    added = [r["id"] for r in results[2:] if "id" in r]
    assert all(len(ids) == 3 for ids in imported)
    assert sorted(c.id for c in store.campaigns()) == sorted([*added, *(i for ids in imported for i in ids)])
    assert len(store.campaigns()) <= plan.campaigns
    refusals = [r["refused"] for r in results if "refused" in r]
    assert all("plan starter allows 5 active campaigns" in why for why in refusals), refusals
    assert len(refusals) == len(results) - len(imported) - len(added)
    assert_needs_kept(store)
