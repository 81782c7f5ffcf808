"""``nakodo account``: accounts, the plans that bound their active campaigns, and what each uses of its plan."""

from __future__ import annotations

import click

from nakodo_dagster.cli.shared import NakodoGroup, open_configured_store, utc_minute
from nakodo_dagster.export import columns
from nakodo_dagster.plan_config import configured_plans, plan_named
from nakodo_dagster.plans import LIMITS, Plan
from nakodo_dagster.store import AccountUsage, check_account_name


@click.group(cls=NakodoGroup)
def account() -> None:
    """Accounts: who campaigns belong to, and the plan that bounds what their active campaigns ask for.

    Plans come from the package (free, starter, pro, unlimited) or from the TOML file NAKODO_PLANS names.
    """


def _plan_in_words(plan: Plan) -> str:
    return f"plan {plan.name} ({plan.describe()})"


def _used(entry: AccountUsage, kind: str, plan: Plan | None) -> str:
    """What the account's active campaigns use of one limit: ``20 of 25``, or ``20`` where there is no limit."""
    used, limit = getattr(entry.usage, kind), getattr(plan, kind, None)
    return f"{used:,}" if limit is None else f"{used:,} of {limit:,}"


@account.command("add")
@click.option("--name", required=True, help="What the account is called (1 to 200 characters, unique).")
@click.option("--plan", "plan_name", required=True, help="One of the plans in force, e.g. free, starter, pro.")
def account_add(name: str, plan_name: str) -> None:
    """Create an account on a plan; its id is printed on the last line.

    \b
    nakodo account add --name "Acme Bakeries" --plan starter
    """
    name = check_account_name(name)
    plan = plan_named(plan_name)
    account_id = open_configured_store().add_account(name, plan.name)
    click.echo(f"Account {name!r} on {_plan_in_words(plan)}")
    click.echo(account_id)


@account.command("list")
def account_list() -> None:
    """Every account, oldest first: its plan and what its active campaigns use of each limit."""
    plans = configured_plans()
    rows = []
    for entry in open_configured_store().accounts():
        plan = plans.get(entry.account.plan)
        name = entry.account.plan if plan else f"{entry.account.plan} (not a plan in force)"
        used = [_used(entry, kind, plan) for kind, _, _ in LIMITS]
        rows.append([entry.account.id, entry.account.name, name, *used, entry.paused_for_plan])
    header = ["id", "name", "plan", *(many for _, _, many in LIMITS), "paused by plan"]
    click.echo(columns(header, rows), nl=False)


@account.command("show")
@click.argument("account_id", type=int)
def account_show(account_id: int) -> None:
    """One account: its plan, its limits, what its active campaigns use and what is left."""
    entry = open_configured_store().account_usage(account_id)
    plan = plan_named(entry.account.plan)
    left = plan.left(entry.usage)
    lines = [
        f"Account {entry.account.id}: {entry.account.name}",
        _plan_in_words(plan),
        f"created: {utc_minute(entry.account.created_at)}",
        *(
            f"{many}: {_used(entry, kind, plan)}" + (" (no limit)" if left[kind] is None else f", {left[kind]:,} left")
            for kind, _, many in LIMITS
        ),
        f"campaigns paused by the plan: {entry.paused_for_plan} (`nakodo campaign list` says why)",
    ]
    click.echo("\n".join(lines))


@account.command("set-plan")
@click.argument("account_id", type=int)
@click.argument("plan_name", metavar="PLAN")
def account_set_plan(account_id: int, plan_name: str) -> None:
    """Move account ACCOUNT_ID to PLAN. If its active campaigns no longer fit, the newest are paused (with the
    reason, in `campaign show` and `campaign list`) until the rest does; resume them once the plan has room.
    Setting the plan the account is on applies its limits again after the plans file changed.
    """
    plan = plan_named(plan_name)
    paused = open_configured_store().set_account_plan(account_id, plan.name)
    click.echo(f"Account {account_id} is on {_plan_in_words(plan)}")
    for campaign_id, reason in paused.items():
        click.echo(f"Paused campaign {campaign_id}: {reason}")
    if not paused:
        click.echo("Its active campaigns fit the plan.")
