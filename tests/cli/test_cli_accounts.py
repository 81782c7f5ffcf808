"""Accounts and plans from the command line: the real ``nakodo`` for the account commands and a refused campaign,
click's runner (in this process, a second faster) for the rest."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from nakodo_dagster.store import open_store

AT_LEEDS = ["--at", "53.75,-1.75", "--radius-km", "2", "--category", "cafe"]
STARTER = "plan starter (5 active campaigns, 500 areas, 1 country)"
FREE = "plan free (0 active campaigns, 0 areas, 0 countries)"


def last_error(done) -> str:
    """The last line on stderr of a process or of click's runner: the one error message."""
    return done.stderr.splitlines()[-1]


def test_accounts_their_plans_and_their_refusals(nakodo, nakodo_here, written):
    added = nakodo("account", "add", "--name", "Acme", "--plan", "starter").stdout.splitlines()
    assert added[0] == f"Account 'Acme' on {STARTER}"
    acme = added[-1]
    leeds = nakodo("campaign", "add", "--name", "Leeds", *AT_LEEDS, "--account", acme).stdout.splitlines()[-1]
    ireland = nakodo("campaign", "add", "--name", "Ireland", "--country", "IE", "--category", "cafe", "--account", acme)
    ireland = ireland.stdout.splitlines()[-1]
    before = written()

    france = nakodo(
        "campaign", "add", "--name", "France", "--country", "FR", "--category", "cafe", "--account", acme, expect=2
    )

    assert last_error(france) == (
        f"Error: plan starter allows 1 country; this campaign needs 1 (FR), 0 are left "
        f"(account {acme}, 'Acme'; `nakodo account show {acme}`)"
    )
    assert written() == before
    shown = nakodo("account", "show", acme).stdout.splitlines()
    assert shown[:2] == [f"Account {acme}: Acme", STARTER]
    assert shown[3:] == [
        "active campaigns: 2 of 5, 3 left",
        "areas: 2 of 500, 498 left",
        "countries: 1 of 1, 0 left",
        "campaigns paused by the plan: 0 (`nakodo campaign list` says why)",
    ]

    # Lowered to free, which holds no campaign: both are paused, newest first, with their reason wherever shown.
    lowered = nakodo("account", "set-plan", acme, "free").stdout.splitlines()
    reason = (
        f"account 'Acme' moved to plan free on {datetime.now(UTC):%Y-%m-%d}, which allows 0 active campaigns "
        f"(the account had 2) and 0 areas (the account had 2) and 0 countries (the account had 1); "
        f"`nakodo campaign resume {ireland}` once the plan has room"
    )
    assert lowered[:2] == [f"Account {acme} is on {FREE}", f"Paused campaign {ireland}: {reason}"]
    assert lowered[2].startswith(f"Paused campaign {leeds}: ")
    assert f"Campaign {ireland} is paused: {reason}" in nakodo_here("campaign", "list").stdout.splitlines()
    shown = nakodo_here("campaign", "show", ireland).stdout.splitlines()
    assert shown[1:3] == [f"status: paused: {reason}", f"account: Acme (id {acme}), plan free"]

    paid_only = (
        "Error: plan free holds no campaign: business outreach is on the paid plans (starter, pro, unlimited); "
        "`nakodo account set-plan ID PLAN` moves the account to one"
    )
    before = written()
    assert last_error(nakodo_here("campaign", "resume", ireland, expect=2)).startswith(paid_only)
    refused = nakodo("campaign", "add", "--name", "Leeds again", *AT_LEEDS, "--account", acme, expect=2)
    assert last_error(refused).startswith(paid_only)
    assert written() == before

    # The default account, which commands that name none use, has no limits.
    nakodo_here("campaign", "add", "--name", "France", "--country", "FR", "--category", "cafe")
    default = nakodo_here("account", "show", "1").stdout.splitlines()
    assert default[1] == "plan unlimited (no limits)"
    assert default[3:6] == [
        "active campaigns: 1 (no limit)",
        "areas: 1 (no limit)",
        "countries: 1 (no limit)",
    ]
    listed = nakodo("account", "list").stdout.splitlines()
    assert [line.split() for line in listed] == [
        ["id", "name", "plan", "active", "campaigns", "areas", "countries", "paused", "by", "plan"],
        ["1", "default", "unlimited", "1", "1", "1", "0"],
        [acme, "Acme", "free", "0", "of", "0", "0", "of", "0", "0", "of", "0", "2"],
    ]


def test_a_plans_file_named_by_the_variable_replaces_the_plans(nakodo, tmp_path):
    plans = tmp_path / "plans.toml"
    plans.write_text("[gold]\ncampaigns = 2\n\n[unlimited]\n", encoding="utf-8")

    gold = nakodo("account", "add", "--name", "Gilt", "--plan", "gold", NAKODO_PLANS=str(plans))
    assert gold.stdout.splitlines()[0] == (
        "Account 'Gilt' on plan gold (2 active campaigns, any number of areas, any number of countries)"
    )
    free = nakodo("account", "add", "--name", "Free", "--plan", "free", NAKODO_PLANS=str(plans), expect=2)
    assert last_error(free) == (
        f"Error: plan 'free' is not known in {plans} (named by NAKODO_PLANS); allowed: gold, unlimited"
    )
    plans.write_text("[gold]\ncampaigns = -2\n", encoding="utf-8")
    broken = nakodo("account", "show", gold.stdout.splitlines()[-1], NAKODO_PLANS=str(plans), expect=2)
    assert last_error(broken).startswith(
        f"Error: plans file {plans} (named by NAKODO_PLANS) is not valid: plan 'gold' sets campaigns = -2"
    )


@pytest.mark.parametrize("database_url", ["duckdb"], indirect=True)
def test_unknown_plans_accounts_and_names_are_refused_and_nothing_written(nakodo_here, database_url):
    plans = "allowed: free, starter, pro, unlimited"
    refused = [
        (["account", "add", "--name", "Acme", "--plan", "gold"], f"plan 'gold' is not known; {plans}"),
        (["account", "add", "--name", "", "--plan", "free"], "account name '' is not allowed"),
        (["account", "add", "--name", "Acme"], "Missing option '--plan'"),
    ]
    for args, message in refused:
        assert message in nakodo_here(*args, expect=2).stderr
    assert not Path(database_url).exists(), "refused before the store is opened"

    acme = nakodo_here("account", "add", "--name", "Acme", "--plan", "free").stdout.splitlines()[-1]
    refused = [
        (["account", "add", "--name", "Acme", "--plan", "pro"], "account name 'Acme' is taken"),
        (["account", "show", "7"], "account 7 does not exist; `nakodo account list` shows the accounts"),
        (["account", "set-plan", "7", "pro"], "account 7 does not exist"),
        (["account", "set-plan", acme, "gold"], f"plan 'gold' is not known; {plans}"),
        (["campaign", "add", "--name", "x", *AT_LEEDS, "--account", "7"], "account 7 does not exist"),
        (["campaign", "add", "--name", "x", *AT_LEEDS, "--account", "Acme"], "'Acme' is not a valid integer"),
    ]
    for args, message in refused:
        assert message in nakodo_here(*args, expect=2).stderr, args
    store = open_store(database_url)
    assert [(a.account.name, a.account.plan) for a in store.accounts()] == [("default", "unlimited"), ("Acme", "free")]
    assert store.campaigns() == []


@pytest.mark.parametrize("database_url", ["duckdb"], indirect=True)
def test_a_paused_campaign_is_not_synced_by_name(nakodo_here, database_url):
    campaign = nakodo_here("campaign", "add", "--name", "Leeds", *AT_LEEDS).stdout.splitlines()[-1]
    nakodo_here("campaign", "pause", campaign)
    refused = nakodo_here("sync", "--campaign", campaign, expect=2).stderr
    assert f"campaign {campaign} is paused, and nothing is imported for a paused campaign: resume it first" in refused
