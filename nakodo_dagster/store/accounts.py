"""Accounts and their plans.

Whatever may grow what an account's active campaigns hold (a campaign added, a location added to an active one, a
campaign resumed) locks the account's row first, checks the plan and writes in the same transaction: concurrent
writers to one account are checked one after the other and never take it past a limit together. Locking the
account before any campaign row keeps PostgreSQL's locks in one order, so none deadlock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import Targeting, areas_for
from nakodo_dagster.plan_config import configured_plans, plan_named
from nakodo_dagster.plans import Holding, Plan, Usage, campaigns_to_pause, locations_in_words, refusal
from nakodo_dagster.store import needs, progress
from nakodo_dagster.store.models import Account, AccountUsage, check_id, not_found

if TYPE_CHECKING:
    from datetime import datetime

    from nakodo_dagster.store.transaction import Transaction

ACCOUNT_COLUMNS = "id, name, plan, created_at"
ACCOUNT = f"SELECT {ACCOUNT_COLUMNS} FROM accounts WHERE id = $account_id"

# Nothing comes back when the name is taken.
ADD_ACCOUNT = """
INSERT INTO accounts (name, plan, created_at) VALUES ($name, $plan, $now)
ON CONFLICT (name) DO NOTHING
RETURNING id
"""

# Touching the account's row locks it until commit in PostgreSQL (DuckDB holds the whole file): whoever checks the
# same account's plan next waits, then sees what this transaction added.
LOCK_ACCOUNT = "UPDATE accounts SET plan = plan WHERE id = $account_id"

SET_ACCOUNT_PLAN = "UPDATE accounts SET plan = $plan WHERE id = $account_id"

# The areas each active campaign of the account needs, as kept beside the campaigns (placement.areas_for).
ACCOUNT_HOLDING = """
SELECT c.id, ca.area
FROM campaigns AS c LEFT JOIN campaign_areas AS ca ON ca.campaign_id = c.id
WHERE c.account_id = $account_id AND c.status = 'active'
"""

# Every account ($everyone) or one, with what its active campaigns hold (areas merged, countries among them) and
# how many of its campaigns its plan paused.
ACCOUNT_USAGE = """
SELECT a.id, a.name, a.plan, a.created_at,
       count(DISTINCT held.campaign_id), count(DISTINCT held.area),
       count(DISTINCT held.area) FILTER (WHERE held.area LIKE 'country:%'),
       (SELECT count(*) FROM campaigns AS p WHERE p.account_id = a.id AND p.paused_reason IS NOT NULL)
FROM accounts AS a
LEFT JOIN (
    SELECT c.account_id, c.id AS campaign_id, ca.area
    FROM campaigns AS c LEFT JOIN campaign_areas AS ca ON ca.campaign_id = c.id
    WHERE c.status = 'active'
) AS held ON held.account_id = a.id
WHERE $everyone OR a.id = $account_id
GROUP BY a.id, a.name, a.plan, a.created_at
ORDER BY a.id
"""

PAUSE_FOR_PLAN = """
UPDATE campaigns SET status = 'paused', paused_reason = paused.reason
FROM (SELECT unnest($campaign_ids::INTEGER[]) AS id, unnest($reasons::TEXT[]) AS reason) AS paused
WHERE campaigns.id = paused.id
"""


def add(tx: Transaction, name: str, plan: str, now: datetime) -> int:
    """Create the account; InvalidInput if the name is taken."""
    rows = tx.rows(ADD_ACCOUNT, name=name, plan=plan, now=now)
    if not rows:
        raise InvalidInput(f"account name {name!r} is taken; `nakodo account list` shows the accounts")
    return rows[0][0]


def account_in(tx: Transaction, account_id: int) -> Account:
    """The account with this id; not found if none."""
    rows = tx.rows(ACCOUNT, account_id=check_id("account", account_id))
    if not rows:
        raise not_found("account", account_id)
    return Account(*rows[0])


def lock(tx: Transaction, account_id: int) -> Account:
    """Lock the account's row until commit (see above) and read it."""
    tx.run(LOCK_ACCOUNT, account_id=check_id("account", account_id))
    return account_in(tx, account_id)


def set_plan(tx: Transaction, account_id: int, new_plan: Plan, day: str) -> dict[int, str]:
    """Move the account to ``new_plan`` (``Store.set_account_plan``); returns the paused campaigns' reasons by
    id."""
    account = lock(tx, account_id)
    tx.run(SET_ACCOUNT_PLAN, plan=new_plan.name, account_id=account.id)
    over = {} if new_plan.limits_nothing else campaigns_to_pause(new_plan, _holding(tx, account.id))
    reasons = {
        campaign_id: f"account {account.name!r} moved to plan {new_plan.name} on {day}, which allows {limits}; "
        f"`nakodo campaign resume {campaign_id}` once the plan has room"
        for campaign_id, limits in over.items()
    }
    if reasons:
        tx.run(PAUSE_FOR_PLAN, campaign_ids=list(reasons), reasons=list(reasons.values()))
        needs.count_needs(tx, list(reasons), -1)
        progress.forget(tx, reasons)
        needs.note_needs_changed(tx)
    return reasons


def _holding(tx: Transaction, account_id: int) -> dict[int, list[str]]:
    """The areas each of the account's active campaigns needs, by campaign."""
    held: dict[int, list[str]] = {}
    for campaign_id, area in tx.rows(ACCOUNT_HOLDING, account_id=account_id):
        areas = held.setdefault(campaign_id, [])
        # A campaign without kept areas (the outer join's NULL) still counts as an active campaign.
        if area is not None:
            areas.append(area)
    return held


def refusals(
    tx: Transaction, account: Account, targetings: Sequence[Targeting], *, new_campaign: bool
) -> list[str | None]:
    """For each targeting in turn (each one more active campaign if ``new_campaign``, else locations added to one),
    why it would take the locked account past its plan, or None if it fits: counted over what the account holds
    and the targetings that fitted before it. Each refusal says which limit, what is needed and what is left."""
    plan = plan_named(account.plan)
    if plan.limits_nothing:
        # Nothing to count: the default account's thousands of campaigns are not read on every add.
        return [None] * len(targetings)
    held = Holding.of(_holding(tx, account.id))
    subject = "this campaign" if new_campaign else "this location"
    campaign_plans = [name for name, other in configured_plans().items() if other.campaigns != 0]
    whys: list[str | None] = []
    for targeting in targetings:
        areas = areas_for(targeting)
        why = refusal(
            plan,
            held,
            areas,
            new_campaign=new_campaign,
            subject=subject,
            what=locations_in_words(targeting.locations),
            campaign_plans=campaign_plans,
        )
        if why:
            whys.append(f"{why} (account {account.id}, {account.name!r}; `nakodo account show {account.id}`)")
        else:
            whys.append(None)
            held = held.adding(areas, new_campaign=new_campaign)
    return whys


def check_room(tx: Transaction, account: Account, targeting: Targeting, *, new_campaign: bool) -> None:
    """Refuse what would take the locked account past its plan: the areas ``targeting`` needs and, if
    ``new_campaign``, one more active campaign. InvalidInput says which limit, what is needed and what is left."""
    [why] = refusals(tx, account, [targeting], new_campaign=new_campaign)
    if why:
        raise InvalidInput(why)


def usages(tx: Transaction, account_id: int | None) -> list[AccountUsage]:
    """Every account's usage (None), or the one account's."""
    rows = tx.rows(ACCOUNT_USAGE, everyone=account_id is None, account_id=account_id or 0)
    return [
        AccountUsage(Account(id_, name, plan, created_at), Usage(campaigns, areas, countries), paused)
        for id_, name, plan, created_at, campaigns, areas, countries, paused in rows
    ]
