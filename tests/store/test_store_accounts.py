"""Accounts and their plans in the store: every limit checked and written in one transaction, on both backends."""

from __future__ import annotations

from datetime import timedelta

import pytest
from store_helpers import NOW, needs_of, query

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import CountryLocation, Location, PointLocation, Targeting, areas_for
from nakodo_dagster.plan_config import plan_named
from nakodo_dagster.plans import Usage
from nakodo_dagster.store import DEFAULT_ACCOUNT_ID, Store, open_store, targeting_to_json
from nakodo_dagster.store.schema import MIGRATIONS

CIRCLE_200 = PointLocation(0.1, 0.1, 200)


def cafes(*locations: Location) -> Targeting:
    return Targeting(locations, ("cafe",))


def spot(lat: float, lng: float) -> Targeting:
    """A 2 km circle at a cell's centre: exactly one area."""
    return cafes(PointLocation(lat + 0.25, lng + 0.25, 2))


def written(store: Store) -> dict[str, int]:
    """Rows of the tables a campaign's add writes, and the last noted change."""
    tables = ("campaigns", "campaign_areas", "campaign_categories")
    counts = {table: query(store, f"SELECT count(*) FROM {table}")[0][0] for table in tables}
    return {**counts, "needs_changes": query(store, "SELECT max(changed_at) FROM needs_changes")[0][0]}


def test_a_free_account_holds_no_campaign_and_its_refusal_names_the_plans_that_do(store):
    acme = store.add_account("Acme", "free")
    before = written(store)

    with pytest.raises(InvalidInput) as refused:
        store.add_campaign("Leeds cafes", spot(53.5, -2), account_id=acme)

    assert str(refused.value).startswith(
        "plan free holds no campaign: business outreach is on the paid plans (starter, pro, unlimited)"
    )
    assert written(store) == before
    assert store.account_usage(acme).usage == Usage(campaigns=0, areas=0, countries=0)


def test_the_default_account_is_unlimited_and_holds_the_campaigns_that_name_none(store):
    [default] = store.accounts()
    assert (default.account.id, default.account.name, default.account.plan) == (
        DEFAULT_ACCOUNT_ID,
        "default",
        "unlimited",
    )
    ids = [store.add_campaign(code, cafes(CountryLocation(code), CIRCLE_200)) for code in ("FR", "DE", "IT")]

    assert {store.campaign(i).account_id for i in ids} == {DEFAULT_ACCOUNT_ID}
    assert store.account_usage(DEFAULT_ACCOUNT_ID).usage == Usage(campaigns=3, areas=64 + 3, countries=3)


def _store_of_version_2_with_a_campaign(database_url: str) -> Store:
    """A store as an older release left it: migrations 1 and 2 only, and one campaign."""

    def work(tx) -> None:
        tx.run("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)")
        for version, statements in MIGRATIONS[:2]:
            for statement in statements:
                tx.run(statement)
            tx.run(
                "INSERT INTO schema_migrations (version, applied_at) VALUES ($version, $now)", version=version, now=NOW
            )
        tx.run(
            "INSERT INTO campaigns (name, targeting, created_at) VALUES ('Older', $targeting, $now)",
            targeting=targeting_to_json(cafes(CIRCLE_200)),
            now=NOW,
        )

    store = open_store(database_url)
    store._transact(work)
    return store


def test_migrating_an_older_store_gives_its_campaigns_to_the_default_account(database_url):
    store = _store_of_version_2_with_a_campaign(database_url)
    store.migrate()

    [campaign] = store.campaigns()
    assert (campaign.name, campaign.status, campaign.account_id, campaign.paused_reason) == (
        "Older",
        "active",
        DEFAULT_ACCOUNT_ID,
        None,
    )
    assert store.account_usage(DEFAULT_ACCOUNT_ID).usage == Usage(campaigns=1, areas=64, countries=0)
    assert store.add_account("Acme", "free") == DEFAULT_ACCOUNT_ID + 1, "new accounts come after the default one"


def test_accounts_have_one_name_each_and_a_plan_in_force(store):
    acme = store.add_account("  Acme  ", "free", now=NOW)
    assert store.account(acme).name == "Acme"
    assert store.account(acme).created_at == NOW
    with pytest.raises(InvalidInput, match="account name 'Acme' is taken"):
        store.add_account("Acme", "pro")
    with pytest.raises(InvalidInput, match="plan 'gold' is not known; allowed: free, starter, pro, unlimited"):
        store.add_account("Gold", "gold")
    for name in ("", "a\nb", "x" * 201, None):
        with pytest.raises(InvalidInput, match="account name"):
            store.add_account(name, "free")
    with pytest.raises(InvalidInput, match="account 99 does not exist; `nakodo account list` shows the accounts"):
        store.account_usage(99)
    with pytest.raises(InvalidInput, match="account 99 does not exist"):
        store.add_campaign("Nobody's", spot(50, 0), account_id=99)
    with pytest.raises(InvalidInput, match="whole number"):
        store.account("2; DROP TABLE accounts")
    assert [(a.account.name, a.account.plan) for a in store.accounts()] == [("default", "unlimited"), ("Acme", "free")]
    assert store.campaigns() == []


def test_a_solo_account_holds_one_campaign_of_at_most_25_areas_and_no_country(store, solo_plan):
    acme = store.add_account("Acme", "solo")
    before = written(store)
    refused = {
        "plan solo allows 25 areas; this campaign needs 64 (a 200 km circle), 25 are left": cafes(CIRCLE_200),
        "plan solo allows 0 countries; this campaign needs 1 (LU), 0 are left": cafes(CountryLocation("LU")),
    }
    for message, targeting in refused.items():
        with pytest.raises(InvalidInput) as refusal:
            store.add_campaign("Too much", targeting, account_id=acme)
        assert str(refusal.value) == f"{message} (account {acme}, 'Acme'; `nakodo account show {acme}`)"
    assert written(store) == before, "a refusal writes nothing"

    first = store.add_campaign("Leeds", spot(53.5, -2), account_id=acme)
    with pytest.raises(InvalidInput, match="plan solo allows 1 active campaign; this campaign needs 1, 0 are left"):
        store.add_campaign("York", spot(54, -1.5), account_id=acme)
    assert [c.id for c in store.campaigns()] == [first]
    assert store.account_usage(acme).usage == Usage(campaigns=1, areas=1, countries=0)


def test_areas_are_merged_across_the_accounts_active_campaigns(store):
    acme = store.add_account("Acme", "starter")
    # Two 200 km circles far apart each: 64 + 72 areas a campaign, two campaigns 272 of the plan's 500.
    pairs = [cafes(PointLocation(0.1, 10 * i + 0.1, 200), PointLocation(20.1, 10 * i + 0.1, 200)) for i in range(4)]
    assert [len(areas_for(t)) for t in pairs] == [136] * 4
    store.add_campaign("pair 0", pairs[0], account_id=acme)
    store.add_campaign("pair 1", pairs[1], account_id=acme)
    assert store.account_usage(acme).usage.areas == 272
    with pytest.raises(InvalidInput, match="this campaign needs 272 \\(a 200 km circle, a 200 km circle, a 200 km"):
        store.add_campaign("pairs 2 and 3", cafes(*pairs[2].locations, *pairs[3].locations), account_id=acme)
    # The same cells again cost nothing: bakeries where the cafes are fit, and so does a campaign half new.
    store.add_campaign("pair 0 bakeries", Targeting(pairs[0].locations, ("bakery",)), account_id=acme)
    with pytest.raises(InvalidInput, match=r"needs 272 .*; 136 of its 408 areas are held already\), 228 are left"):
        store.add_campaign(
            "pairs 1 to 3", cafes(*pairs[1].locations, *pairs[2].locations, *pairs[3].locations), account_id=acme
        )
    store.add_campaign("pairs 1 and 2", cafes(*pairs[1].locations, *pairs[2].locations), account_id=acme)
    assert store.account_usage(acme).usage == Usage(campaigns=4, areas=408, countries=0)


def test_a_location_is_checked_when_its_campaign_is_active_and_the_campaign_when_resumed(store, solo_plan):
    acme = store.add_account("Acme", "solo")
    campaign = store.add_campaign("Leeds", spot(53.5, -2), account_id=acme)
    before = written(store)
    with pytest.raises(InvalidInput, match="plan solo allows 25 areas; this location needs 64 \\(a 200 km circle\\)"):
        store.add_campaign_location(campaign, CIRCLE_200)
    with pytest.raises(InvalidInput, match="plan solo allows 0 countries; this location needs 1 \\(IE\\), 0 are left"):
        store.add_campaign_location(campaign, CountryLocation("IE"))
    assert written(store) == before
    assert store.campaign(campaign).targeting == spot(53.5, -2)
    store.add_campaign_location(campaign, PointLocation(54.25, -1.75, 2))

    # Pausing frees what the campaign held: another campaign fits, and the paused one may grow meanwhile.
    store.set_campaign_status(campaign, "paused")
    other = store.add_campaign("York", spot(54, -1), account_id=acme)
    store.add_campaign_location(campaign, CIRCLE_200)
    with pytest.raises(InvalidInput, match="plan solo allows 1 active campaign; this campaign needs 1, 0 are left"):
        store.set_campaign_status(campaign, "active")
    store.set_campaign_status(other, "paused")
    with pytest.raises(
        InvalidInput, match="this campaign needs 66 \\(a 2 km circle, a 2 km circle and a 200 km circle\\)"
    ):
        store.set_campaign_status(campaign, "active")
    assert store.campaign(campaign).status == "paused"
    store.set_campaign_status(other, "active")
    # Resuming an active campaign asks for no more room.
    store.set_campaign_status(other, "active")


def test_a_lowered_plan_pauses_the_newest_campaigns_with_a_reason_and_tells_the_sensors(store, solo_plan):
    acme = store.add_account("Acme", "starter")
    first, second, third = (
        store.add_campaign(name, targeting, account_id=acme)
        for name, targeting in (
            ("Leeds", spot(53.5, -2)),
            ("York", spot(54, -1.5)),
            ("Ireland", cafes(CountryLocation("IE"))),
        )
    )
    store.add_campaign("Someone else's", spot(50, 0))
    noted = written(store)["needs_changes"]

    paused = store.set_account_plan(acme, "solo", now=NOW)

    moved = "account 'Acme' moved to plan solo on 2026-11-20, which allows"
    assert paused == {
        third: f"{moved} 1 active campaign (the account had 3) and 0 countries (the account had 1); "
        f"`nakodo campaign resume {third}` once the plan has room",
        second: f"{moved} 1 active campaign (the account had 2); "
        f"`nakodo campaign resume {second}` once the plan has room",
    }
    assert [(c.id, c.status, c.paused_reason) for c in store.campaigns()[:3]] == [
        (first, "active", None),
        (second, "paused", paused[second]),
        (third, "paused", paused[third]),
    ]
    assert store.account(acme).plan == "solo"
    assert store.account_usage(acme).usage == Usage(campaigns=1, areas=1, countries=0)
    assert store.account_usage(acme).paused_for_plan == 2
    assert written(store)["needs_changes"] > noted, "the import sensor looks again"
    assert store.campaign_accounts([second])[second].paused_reason == paused[second]

    # A bigger plan resumes nothing by itself; a resume is checked, and clears the reason, as a hand pause does.
    assert store.set_account_plan(acme, "pro") == {}
    assert store.account_usage(acme).paused_for_plan == 2
    store.set_campaign_status(third, "active")
    store.set_campaign_status(second, "paused")
    assert {c.id: c.paused_reason for c in store.campaigns()[:3]} == {first: None, second: None, third: None}
    assert store.set_account_plan(acme, "pro") == {}, "a plan the account fits pauses nothing"


def test_imports_leave_out_the_campaigns_a_plan_paused_and_count_them(store, solo_plan):
    acme = store.add_account("Acme", "starter")
    kept = store.add_campaign("Leeds", spot(53.5, -2), account_id=acme)
    paused = store.add_campaign("Paris", spot(48.5, 2), account_id=acme)
    store.set_account_plan(acme, "solo")

    reservation = store.reserve_missing(NOW, max_runs=10)

    assert [pair for run in reservation.runs for pair in run.pairs] == [("cell:53.5,-2", "cafe")]
    assert reservation.paused_for_plan == 1
    named = store.reserve_missing(NOW + timedelta(days=1), max_runs=10, campaign_ids=[paused])
    assert (named.runs, named.missing_runs, named.paused_for_plan) == ([], 0, 1)
    assert needs_of(store, NOW, [kept, paused]).missing == {}
    assert store.coverage(NOW, listed=5).counts["missing"] == 0


# Eight processes add campaigns to one account at the same moment: (plan, each process's campaign, how many fit).
RACES = {
    "campaigns": ("solo", [spot(50 + i, 0) for i in range(8)], 1),
    # Two 200 km circles on the equator and the 20th parallel: 64 + 72 areas; 3 of them fit in 500.
    "areas": (
        "starter",
        [cafes(PointLocation(0.1, 20 * i - 69.9, 200), PointLocation(20.1, 20 * i - 69.9, 200)) for i in range(8)],
        3,
    ),
    "countries": ("starter", [cafes(CountryLocation(c)) for c in ("FR", "DE", "IT", "ES", "PT", "NL", "BE", "AT")], 1),
}


@pytest.mark.parametrize("limit", list(RACES))
def test_eight_processes_adding_to_one_account_never_take_it_past_its_plan(
    store, database_url, workers, limit, solo_plan
):
    plan, targetings, fit = RACES[limit]
    acme = store.add_account("Acme", plan)
    args = [
        {"account_id": acme, "name": f"campaign {i}", "targeting": targeting_to_json(t)}
        for i, t in enumerate(targetings)
    ]

    results = workers.run("add-campaign", database_url, args)

    added = [result["id"] for result in results if "id" in result]
    refusals = [result["refused"] for result in results if "refused" in result]
    assert len(added) == fit
    assert len(refusals) == len(targetings) - fit
    assert all(message.startswith(f"plan {plan} allows") for message in refusals), refusals
    assert [c.id for c in store.campaigns()] == sorted(added)
    usage, limits = store.account_usage(acme).usage, plan_named(plan)
    assert usage.areas == len({area for c in store.campaigns() for area in areas_for(c.targeting)})
    assert usage.campaigns <= limits.campaigns and usage.areas <= limits.areas and usage.countries <= limits.countries
