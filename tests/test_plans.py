"""Plans as pure arithmetic (no database), and the plans file: the package's, or the one NAKODO_PLANS names."""

from __future__ import annotations

from pathlib import Path

import pytest

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import CountryLocation, PointLocation, Targeting, areas_for
from nakodo_dagster.plan_config import PLANS_VARIABLE, configured_plans, plan_named
from nakodo_dagster.plans import Holding, Plan, Usage, campaigns_to_pause, locations_in_words, refusal

FREE = Plan("free", campaigns=0, areas=0, countries=0)
# A small paid plan, as an operator's plans file may hold one: the limits' arithmetic.
SOLO = Plan("solo", campaigns=1, areas=25, countries=0)
STARTER = Plan("starter", campaigns=5, areas=500, countries=1)
UNLIMITED = Plan("unlimited")
# A 200 km circle on the equator: 64 cells of 0.5 degree.
CIRCLE = (PointLocation(0.1, 0.1, 200),)


def cells(count: int, lat: float = 0) -> list[str]:
    """``count`` cells in a row along a parallel: distinct areas, no country."""
    return [f"cell:{lat:g},{i / 2:g}" for i in range(count)]


def adding(plan: Plan, held: Holding, areas: list[str], new_campaign: bool = True, what: str = "x") -> str | None:
    subject = "this campaign" if new_campaign else "this location"
    return refusal(plan, held, areas, new_campaign=new_campaign, subject=subject, what=what)


@pytest.fixture
def no_override(monkeypatch) -> None:
    monkeypatch.delenv(PLANS_VARIABLE, raising=False)


def test_the_shipped_plans_are_the_documented_ones(no_override):
    assert configured_plans() == {
        "free": FREE,
        "starter": STARTER,
        "pro": Plan("pro", campaigns=50, areas=10_000, countries=10),
        "unlimited": UNLIMITED,
    }


def test_a_200_km_circle_on_a_small_plan_says_what_it_needs_and_what_is_left():
    areas = list(areas_for(Targeting(CIRCLE, ("cafe",))))
    assert len(areas) == 64

    why = adding(SOLO, Holding.of({}), areas, what=locations_in_words(CIRCLE))

    assert why == "plan solo allows 25 areas; this campaign needs 64 (a 200 km circle), 25 are left"


def test_areas_the_account_holds_already_count_once():
    held = Holding.of({1: ["cell:0,0", "cell:0,0.5"], 2: ["cell:0,0.5", "cell:0.5,0"]})
    assert held.usage == Usage(campaigns=2, areas=3, countries=0)
    tight = Plan("tight", campaigns=5, areas=4)

    assert adding(tight, held, ["cell:0,0", "cell:0,0.5", "cell:9,9"]) is None
    assert adding(tight, held, ["cell:0,0", "cell:8,8", "cell:9,9"], what="a 25 km circle") == (
        "plan tight allows 4 areas; this campaign needs 2 (a 25 km circle; 1 of its 3 areas are held already), "
        "1 is left"
    )


def test_campaigns_and_countries_are_limited_too():
    france = Holding.of({1: ["country:FR"]})
    assert (
        adding(STARTER, france, ["country:DE"])
        == "plan starter allows 1 country; this campaign needs 1 (DE), 0 are left"
    )
    # The country the account holds already costs nothing more; a location adds no campaign.
    assert adding(STARTER, france, ["country:FR", "cell:0,0"], new_campaign=False) is None
    five = Holding.of({i: cells(1, lat=i) for i in range(5)})
    assert (
        adding(STARTER, five, cells(1, lat=9))
        == "plan starter allows 5 active campaigns; this campaign needs 1, 0 are left"
    )
    assert adding(STARTER, five, cells(1, lat=9), new_campaign=False) is None


def test_the_free_plan_holds_no_campaign_and_names_the_plans_that_do():
    why = refusal(
        FREE,
        Holding.of({}),
        ["cell:0,0"],
        new_campaign=True,
        subject="this campaign",
        what="x",
        campaign_plans=["starter", "pro"],
    )
    assert why == (
        "plan free holds no campaign: business outreach is on the paid plans (starter, pro); "
        "`nakodo account set-plan ID PLAN` moves the account to one"
    )


def test_every_limit_exceeded_is_named():
    why = adding(SOLO, Holding.of({1: cells(24)}), ["country:FR", "cell:9,9"], what="FR and a 2 km circle")
    assert why == (
        "plan solo allows 1 active campaign; this campaign needs 1, 0 are left; "
        "plan solo allows 25 areas; this campaign needs 2 (FR and a 2 km circle), 1 is left; "
        "plan solo allows 0 countries; this campaign needs 1 (FR), 0 are left"
    )


def test_past_a_lowered_limit_only_what_grows_is_refused():
    over = Holding.of({1: cells(30)})
    assert adding(SOLO, over, cells(3), new_campaign=False) is None
    assert adding(SOLO, over, ["cell:9,9"], new_campaign=False, what="a 2 km circle") == (
        "plan solo allows 25 areas; this location needs 1 (a 2 km circle), 0 are left"
    )


def test_a_plan_without_limits_refuses_nothing():
    assert UNLIMITED.limits_nothing and not SOLO.limits_nothing
    held = Holding.of({i: [*cells(100, lat=i), f"country:{code}"] for i, code in enumerate(["FR", "DE", "IT"])})
    assert adding(UNLIMITED, held, [*cells(1000, lat=50), "country:ES"]) is None


def test_what_is_left_and_how_a_plan_reads():
    assert SOLO.left(Usage(1, 20, 0)) == {"campaigns": 0, "areas": 5, "countries": 0}
    assert SOLO.left(Usage(3, 30, 2)) == {"campaigns": 0, "areas": 0, "countries": 0}, "never below 0"
    assert UNLIMITED.left(Usage(3, 30, 2)) == {"campaigns": None, "areas": None, "countries": None}
    assert SOLO.describe() == "1 active campaign, 25 areas, 0 countries"
    assert Plan("pro", 50, 10_000, 10).describe() == "50 active campaigns, 10,000 areas, 10 countries"
    assert UNLIMITED.describe() == "no limits"
    assert Plan("cells", areas=10).describe() == "any number of active campaigns, 10 areas, any number of countries"


def test_locations_in_words():
    assert locations_in_words(CIRCLE) == "a 200 km circle"
    two = (PointLocation(0, 0, 25), PointLocation(1, 1, 2), CountryLocation("FR"))
    assert locations_in_words(two) == "a 25 km circle, a 2 km circle and FR"


def test_a_lowered_plan_pauses_the_newest_campaigns_until_the_rest_fits():
    campaigns = {1: cells(10, lat=1), 2: cells(10, lat=2), 3: cells(10, lat=3)}
    assert campaigns_to_pause(SOLO, campaigns) == {
        3: "1 active campaign (the account had 3) and 25 areas (the account had 30)",
        2: "1 active campaign (the account had 2)",
    }
    assert campaigns_to_pause(STARTER, campaigns) == {}


def test_a_lowered_plan_counts_shared_areas_once_and_pauses_newest_first_whatever_their_size():
    shared = Plan("shared", areas=15)
    # The second campaign needs the first one's cells: it costs nothing, so only the third goes.
    assert campaigns_to_pause(shared, {1: cells(10), 2: cells(10), 3: cells(10, lat=5)}) == {
        3: "15 areas (the account had 20)"
    }
    # Newest first even when an older campaign is the bigger one: the rule a user can predict.
    assert list(campaigns_to_pause(Plan("small", areas=12), {1: cells(10), 2: cells(5, lat=5)})) == [2]
    countries = campaigns_to_pause(STARTER, {1: ["country:FR"], 2: ["country:DE"], 3: cells(2)})
    assert countries == {3: "1 country (the account had 2)", 2: "1 country (the account had 2)"}


def test_a_plans_file_named_by_the_variable_replaces_the_shipped_plans(tmp_path, monkeypatch):
    override = tmp_path / "plans.toml"
    override.write_text('[gold]\ncampaigns = 3\nareas = 1_000\n\n["trial-2"]\ncountries = 0\n', encoding="utf-8")
    monkeypatch.setenv(PLANS_VARIABLE, str(override))

    assert configured_plans() == {
        "gold": Plan("gold", campaigns=3, areas=1000),
        "trial-2": Plan("trial-2", countries=0),
    }
    assert plan_named("gold").areas == 1000
    with pytest.raises(InvalidInput) as refused:
        plan_named("free")
    known = "allowed: gold, trial-2"
    assert str(refused.value) == f"plan 'free' is not known in {override} (named by NAKODO_PLANS); {known}"


def test_the_plans_file_is_read_at_each_call(tmp_path, monkeypatch, no_override):
    assert plan_named("free") == FREE
    override = tmp_path / "plans.toml"
    override.write_text("[free]\ncampaigns = 2\n", encoding="utf-8")
    monkeypatch.setenv(PLANS_VARIABLE, str(override))
    assert plan_named("free") == Plan("free", campaigns=2)
    override.write_text("[free]\ncampaigns = 3\n", encoding="utf-8")
    assert plan_named("free") == Plan("free", campaigns=3)
    monkeypatch.setenv(PLANS_VARIABLE, "  ")
    assert plan_named("free") == FREE, "an empty variable means the shipped plans"


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("[free\n", "it is not TOML"),
        ("# nothing\n", "it defines no plan"),
        ("[Free]\n", "plan name 'Free' is not allowed"),
        ("free = 1\n", "plan 'free' is not a table"),
        (
            "[free]\ncells = 25\n",
            "plan 'free' sets 'cells', which is not a limit; allowed: campaigns, areas, countries",
        ),
        ("[free]\nareas = -1\n", "plan 'free' sets areas = -1; each plan is a table of whole numbers, 0 or more"),
        ("[free]\nareas = 2.5\n", "plan 'free' sets areas = 2.5"),
        ("[free]\nareas = true\n", "plan 'free' sets areas = True"),
        ("[free]\nareas = '25'\n", "plan 'free' sets areas = '25'"),
    ],
)
def test_a_bad_plans_file_is_one_error_naming_the_file_and_what_is_wrong(tmp_path, monkeypatch, text, what):
    override = tmp_path / "plans.toml"
    override.write_text(text, encoding="utf-8")
    monkeypatch.setenv(PLANS_VARIABLE, str(override))
    with pytest.raises(InvalidInput) as refused:
        configured_plans()
    assert str(refused.value).startswith(f"plans file {override} (named by NAKODO_PLANS) is not valid: {what}")


def test_a_plans_file_that_cannot_be_read_is_named(tmp_path, monkeypatch):
    missing = tmp_path / "nowhere.toml"
    monkeypatch.setenv(PLANS_VARIABLE, str(missing))
    with pytest.raises(InvalidInput, match=f"plans file {missing} \\(named by NAKODO_PLANS\\) cannot be read: "):
        plan_named("free")
    monkeypatch.setenv(PLANS_VARIABLE, str(Path(__file__).parent))
    with pytest.raises(InvalidInput, match="cannot be read"):
        plan_named("free")
