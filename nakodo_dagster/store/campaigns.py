"""Campaigns: created, paused or resumed, given a location, each checked against its account's plan under the
account's lock (``accounts``), and what they need kept beside them (``needs``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import Location, Targeting, first_area
from nakodo_dagster.store import accounts, needs, progress
from nakodo_dagster.store.models import (
    Account,
    Campaign,
    CampaignAccount,
    CampaignsRefused,
    NewCampaign,
    check_id,
    not_found,
    targeting_from_json,
    targeting_to_json,
)

if TYPE_CHECKING:
    from datetime import datetime

    from nakodo_dagster.store.transaction import Transaction

CAMPAIGN_COLUMNS = "id, name, targeting, status, created_at, account_id, paused_reason"
CAMPAIGN = f"SELECT {CAMPAIGN_COLUMNS} FROM campaigns WHERE id = $id"
CAMPAIGNS = f"SELECT {CAMPAIGN_COLUMNS} FROM campaigns WHERE status IN (SELECT unnest($statuses::TEXT[])) ORDER BY id"
EVERY_CAMPAIGN = f"SELECT {CAMPAIGN_COLUMNS} FROM campaigns"

# Campaigns a statement of ``write`` writes at most: a batch of 200 km circles is about 100,000 areas.
WRITE_BATCH = 1_000
# The tables ``write`` fills, whose statistics a bulk write brings up to date (``Store.refresh_campaign_statistics``).
CAMPAIGN_TABLES = ("campaigns", "campaign_areas", "campaign_categories", "progress_due", "needed_pairs")

# The ids of $count new campaigns, in order: campaigns added together get theirs in the order they were given.
NEW_CAMPAIGN_IDS = "SELECT nextval('campaigns_id_seq') AS id FROM generate_series(1, $count) ORDER BY id"

ADD_CAMPAIGNS = """
INSERT INTO campaigns (id, name, targeting, created_at, account_id, first_area)
SELECT unnest($ids::INTEGER[]), unnest($names::TEXT[]), unnest($targetings::TEXT[]), CAST($now AS TIMESTAMPTZ),
       unnest($account_ids::INTEGER[]), unnest($first_areas::TEXT[])
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


def add(tx: Transaction, campaign: NewCampaign, now: datetime) -> int:
    """Create an active campaign if its account's plan has room for it (``Store.add_campaign``); returns its id."""
    account = accounts.lock(tx, campaign.account_id)
    accounts.check_room(tx, account, campaign.targeting, new_campaign=True)
    [campaign_id] = write(tx, [campaign], now)
    needs.note_needs_changed(tx)
    return campaign_id


def add_many(
    tx: Transaction,
    campaigns: Sequence[NewCampaign],
    now: datetime,
    *,
    check_only: bool,
    written: Callable[[int], None] | None,
) -> list[int]:
    """Create these active campaigns if every one fits (``Store.add_campaigns``); returns their ids."""
    refused = refusals(tx, campaigns, lock=not check_only)
    if refused:
        raise CampaignsRefused(refused)
    if check_only:
        return []
    ids = write(tx, campaigns, now, written)
    needs.note_needs_changed(tx)
    return ids


def refusals(tx: Transaction, campaigns: Sequence[NewCampaign], *, lock: bool) -> dict[int, str]:
    """Why each campaign that does not fit is refused, by its place in ``campaigns``: its account is unknown, or
    its account's plan has no room for it once the account's active campaigns and the campaigns of the account
    before it are counted. ``lock`` locks the accounts, in id order: one order for every writer, so none deadlock."""
    by_account: dict[int, list[int]] = {}
    for index, campaign in enumerate(campaigns):
        by_account.setdefault(campaign.account_id, []).append(index)
    refused: dict[int, str] = {}
    for account_id, indexes in sorted(by_account.items()):
        try:
            account = accounts.lock(tx, account_id) if lock else accounts.account_in(tx, account_id)
        except InvalidInput as unknown:
            refused.update(dict.fromkeys(indexes, str(unknown)))
            continue
        targetings = [campaigns[index].targeting for index in indexes]
        whys = accounts.refusals(tx, account, targetings, new_campaign=True)
        refused.update((index, why) for index, why in zip(indexes, whys, strict=True) if why)
    return refused


def write(
    tx: Transaction, campaigns: Sequence[NewCampaign], now: datetime, written: Callable[[int], None] | None = None
) -> list[int]:
    """Create these active campaigns, checked already, in batches of WRITE_BATCH, and keep what they need (their
    areas worked out here, their categories, their progress due, then the pairs' counts); ``written`` is told how
    many each batch wrote, the last batch once the pairs are counted too. Returns their ids, in order."""
    ids = [campaign_id for (campaign_id,) in tx.rows(NEW_CAMPAIGN_IDS, count=len(campaigns))]
    starts = range(0, len(campaigns), WRITE_BATCH)
    for start in starts:
        batch, batch_ids = campaigns[start : start + WRITE_BATCH], ids[start : start + WRITE_BATCH]
        tx.run(
            ADD_CAMPAIGNS,
            ids=batch_ids,
            names=[c.name for c in batch],
            targetings=[targeting_to_json(c.targeting) for c in batch],
            now=now,
            account_ids=[c.account_id for c in batch],
            first_areas=[first_area(c.targeting).key for c in batch],
        )
        needs.keep_campaign_needs(tx, dict(zip(batch_ids, (c.targeting for c in batch), strict=True)))
        progress.note_due(tx, batch_ids)
        if written and start != starts[-1]:
            written(len(batch))
    # Counted once for all: their pairs are locked in one sorted order, as a campaign added meanwhile locks its own,
    # which then waits rather than deadlocks.
    needs.count_needs(tx, ids, 1)
    if written:
        written(len(campaigns) - starts[-1])
    return ids


def _lock_account(tx: Transaction, campaign_id: int) -> tuple[Campaign, Account]:
    """Lock the campaign's account, then read the campaign again: its status and locations as of the lock."""
    account = accounts.lock(tx, campaign_in(tx, campaign_id).account_id)
    return campaign_in(tx, campaign_id), account


def set_status(tx: Transaction, campaign_id: int, status: str) -> None:
    """Pause or resume the campaign (``Store.set_campaign_status``)."""
    # Pausing locks too: the status read under the lock says whether the campaign's pairs are counted.
    campaign, account = _lock_account(tx, campaign_id)
    if status == "active" and campaign.status != "active":
        accounts.check_room(tx, account, campaign.targeting, new_campaign=True)
    # No RETURNING: DuckDB runs UPDATE ... RETURNING as a delete and an insert, which the foreign key from
    # the campaign's businesses refuses.
    tx.run(SET_CAMPAIGN_STATUS, status=status, id=campaign.id)
    if campaign.status != status:
        needs.count_needs(tx, [campaign.id], 1 if status == "active" else -1)
    if status == "active":
        progress.note_due(tx, [campaign.id])
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
        accounts.check_room(tx, account, added, new_campaign=False)
    tx.run(SET_TARGETING, targeting=targeting_to_json(targeting), id=campaign.id)
    new_areas = needs.keep_campaign_areas(tx, campaign.id, added)
    if campaign.status == "active" and new_areas:
        needs.count_needs(tx, [campaign.id], 1, areas=new_areas)
        progress.note_due(tx, [campaign.id])
    needs.note_needs_changed(tx)
    return replace(campaign, targeting=targeting)


def campaign_accounts(tx: Transaction, campaign_ids: Iterable[int]) -> dict[int, CampaignAccount]:
    """The account of each of these campaigns, and whether the campaign is active (or paused, and why)."""
    rows = tx.rows(CAMPAIGN_ACCOUNTS, campaign_ids=list(campaign_ids))
    return {
        campaign_id: CampaignAccount(campaign_id, Account(*account), status, reason)
        for campaign_id, *account, status, reason in rows
    }
