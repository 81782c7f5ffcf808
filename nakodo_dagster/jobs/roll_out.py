"""The roll_out_release job: ``nakodo imports roll-out`` from the Dagster UI's launchpad."""

from datetime import UTC, datetime

import dagster as dg
from pydantic import Field

from nakodo_dagster.imports.events import roll_out_observation
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.roll_out import NEWEST, roll_out
from nakodo_dagster.store.models import ROLL_OUT_JOB
from nakodo_dagster.words import plural


class RollOutConfig(dg.Config):
    """Which pairs move now, and to which release: exactly one of campaign, category and all."""

    release: str = Field(
        default=NEWEST,
        description="The release the import sensor reads, by name (YYYY-MM-DD.N) or 'newest'.",
    )
    campaign: int | None = Field(default=None, description="The pairs of this active campaign.")
    category: str | None = Field(default=None, description="The pairs of this category active campaigns need.")
    all: bool = Field(default=False, description="Every pair active campaigns need.")


@dg.op
def roll_out_pairs(
    context: dg.OpExecutionContext, config: RollOutConfig, store: StoreResource, overture: OvertureResource
) -> None:
    """Ask the chosen pairs to move to the release now; the import sensor's next ticks ask for them."""
    release, asked = roll_out(
        store.store,
        overture.root,
        overture.release,
        config.release,
        campaign_id=config.campaign,
        category=config.category,
        everything=config.all,
    )
    status = store.store.roll_out_status(release, datetime.now(UTC))
    message = (
        f"Asked {plural(asked, 'pair')} to move to release {release} now: the import sensor's next ticks ask for them "
        f"through the import queue, accounts taking turns, each past the drift gate. {status.in_words()}"
    )
    context.log.info(message)
    context.log_event(roll_out_observation(status, message))


@dg.job(
    name=ROLL_OUT_JOB,
    executor_def=dg.in_process_executor,
    description="Move chosen places pairs (a campaign's, a category's, or all) to the release the import sensor "
    "reads now, rather than as each turns 35 days old: the pairs are asked for by the import sensor through its "
    "queue, fair across accounts, each run past the drift gate. `nakodo imports roll-out` does the same.",
)
def roll_out_release() -> None:
    roll_out_pairs()
