"""Campaigns: created, paused or resumed, given a location, each checked against its account's plan under the
account's lock (``accounts``), and what they need kept beside them (``needs``)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import Location, Targeting, areas_for
from nakodo_dagster.store import accounts, needs, progress
from nakodo_dagster.store.models import (
    Account,
    Campaign,
    CampaignAccount,
    check_id,
    not_found,
    targeting_from_json,
    targeting_to_json,
)

if TYPE_CHECKING:
    from nakodo_dagster.store.transaction import Transaction

CAMPAIGN_COLUMNS = "id, name, targeting, status, created_at, account_id, paused_reason"
CAMPAIGN = f"SELECT {CAMPAIGN_COLUMNS} FROM campaigns WHERE id = $id"
CAMPAIGNS = f"SELECT {CAMPAIGN_COLUMNS} FROM campaigns WHERE status IN (SELECT unnest($statuses::TEXT[])) ORDER BY id"
EVERY_CAMPAIGN = f"SELECT {CAMPAIGN_COLUMNS} FROM campaigns"

ADD_CAMPAIGN = """
INSERT INTO campaigns (name, targeting, created_at, account_id) VALUES ($name, $targeting, $now, $account_id)
RETURNING id
"""

# A campaign paused by hand or resumed has no reason of the store's: only set_account_plan writes one.
SET_CAMPAIGN_STATUS = "UPDATE campaigns SET status = $status, paused_reason = NULL WHERE id = $id"
SET_TARGETING = "UPDATE campaigns SET targeting = $targeting WHERE id = $id"

CAMPAIGN_ACCOUNTS = """
SELECT c.id, a.id, a.name, a.plan, a.created_at, c.status, c.paused_reason
FROM campaigns AS c JOIN accounts AS a ON a.id = c.account_id
WHERE c.id IN (SELECT unnest($campaign_ids::INTEGER[]))
"""


def campaign(row: tuple) -> Campaign:
    """A campaigns row (CAMPAIGN_COLUMNS) as a Campaign."""
    id_, name, targeting, status, created_at, account_id, paused_reason = row
    return Campaign(id_, name, targeting_from_json(targeting), status, created_at, account_id, paused_reason)


def campaign_in(tx: Transaction, campaign_id: int) -> Campaign:
    """The campaign with this id; not found if none."""
    rows = tx.rows(CAMPAIGN, id=check_id("campaign", campaign_id))
    if not rows:
        raise not_found("campaign", campaign_id)
    return campaign(rows[0])


def every_campaign(tx: Transaction) -> list[Campaign]:
    """Every campaign, whatever its status, in no particular order."""
    return [campaign(row) for row in tx.rows(EVERY_CAMPAIGN)]


def add(tx: Transaction, params: dict[str, Any], targeting: Targeting, account_id: int) -> int:
    """Create an active campaign (``params``: name, targeting as JSON, now) if the account's plan has room."""
    account = accounts.lock(tx, account_id)
    accounts.check_room(tx, account, areas_for(targeting), targeting.locations, new_campaign=True)
    [(campaign_id,)] = tx.rows(ADD_CAMPAIGN, **params, account_id=account.id)
    needs.keep_campaign_needs(tx, campaign_id, targeting)
    needs.count_needs(tx, [campaign_id], 1)
    progress.note_due(tx, campaign_id)
    needs.note_needs_changed(tx)
    return campaign_id


def _lock_account(tx: Transaction, campaign_id: int) -> tuple[Campaign, Account]:
    """Lock the campaign's account, then read the campaign again: its status and locations as of the lock."""
    account = accounts.lock(tx, campaign_in(tx, campaign_id).account_id)
    return campaign_in(tx, campaign_id), account


def set_status(tx: Transaction, campaign_id: int, status: str) -> None:
    """Pause or resume the campaign (``Store.set_campaign_status``)."""
    # Pausing locks too: the status read under the lock says whether the campaign's pairs are counted.
    campaign, account = _lock_account(tx, campaign_id)
    if status == "active" and campaign.status != "active":
        locations = campaign.targeting.locations
        accounts.check_room(tx, account, areas_for(campaign.targeting), locations, new_campaign=True)
    # No RETURNING: DuckDB runs UPDATE ... RETURNING as a delete and an insert, which the foreign key from
    # the campaign's businesses refuses.
    tx.run(SET_CAMPAIGN_STATUS, status=status, id=campaign.id)
    if campaign.status != status:
        needs.count_needs(tx, [campaign.id], 1 if status == "active" else -1)
    if status == "active":
        progress.note_due(tx, campaign.id)
    else:
        progress.forget(tx, [campaign.id])
    needs.note_needs_changed(tx)


def add_location(tx: Transaction, campaign_id: int, location: Location) -> Campaign:
    """Add a point or a country to the campaign's targeting (``Store.add_campaign_location``)."""
    # The account's lock also makes two locations added to the campaign at once go one after the other,
    # so that neither is lost.
    campaign, account = _lock_account(tx, campaign_id)
    if location in campaign.targeting.locations:
        raise InvalidInput(f"campaign {campaign_id} already targets this location; `campaign show` lists them")
    targeting = Targeting((*campaign.targeting.locations, location), campaign.targeting.categories)
    added = Targeting((location,), targeting.categories)
    if campaign.status == "active":
        # A paused campaign holds nothing: it is checked against the plan when it is resumed.
        accounts.check_room(tx, account, areas_for(added), (location,), new_campaign=False)
    tx.run(SET_TARGETING, targeting=targeting_to_json(targeting), id=campaign.id)
    new_areas = needs.keep_campaign_areas(tx, campaign.id, added)
    if campaign.status == "active" and new_areas:
        needs.count_needs(tx, [campaign.id], 1, areas=new_areas)
        progress.note_due(tx, campaign.id)
    needs.note_needs_changed(tx)
    return replace(campaign, targeting=targeting)


def campaign_accounts(tx: Transaction, campaign_ids: Iterable[int]) -> dict[int, CampaignAccount]:
    """The account of each of these campaigns, and whether the campaign is active (or paused, and why)."""
    rows = tx.rows(CAMPAIGN_ACCOUNTS, campaign_ids=list(campaign_ids))
    return {
        campaign_id: CampaignAccount(campaign_id, Account(*account), status, reason)
        for campaign_id, *account, status, reason in rows
    }
