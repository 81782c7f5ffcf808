"""The search_campaigns_job: one run searches every campaign due at a search sensor tick."""

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import dagster as dg
from pydantic import Field

from nakodo_dagster import tags
from nakodo_dagster.jobs import CONSOLE_LOGGER_CONFIG, passing_faults_retried
from nakodo_dagster.partitions import apply_partitions_requests, campaign_partition, campaign_partitions_requests
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.search import CAMPAIGN_SEARCH, search_campaigns
from nakodo_dagster.words import plural


class SearchBatchConfig(dg.Config):
    """The campaigns one run searches, and why each was due (as the search sensor saw it)."""

    campaign_ids: list[int]
    reasons: dict[str, str] = Field(default_factory=dict)


def search_run_config(campaign_ids: Sequence[int], reasons: Mapping[int, str] | None = None) -> dg.RunConfig:
    """The run config of ``search_campaigns_job`` for these campaigns."""
    config = SearchBatchConfig(campaign_ids=list(campaign_ids), reasons={str(k): v for k, v in (reasons or {}).items()})
    return dg.RunConfig(ops={search_due_campaigns.name: config}, loggers=CONSOLE_LOGGER_CONFIG)


@dg.op
def search_due_campaigns(
    context: dg.OpExecutionContext, config: SearchBatchConfig, store: StoreResource, overture: OvertureResource
) -> None:
    """Search every campaign of the batch; one ``campaign_search`` materialisation per campaign."""
    with passing_faults_retried(context):
        _search_batch(context, config, store, overture)


def _search_batch(
    context: dg.OpExecutionContext, config: SearchBatchConfig, store: StoreResource, overture: OvertureResource
) -> None:
    names = {p.campaign_id: p.name for p in store.store.search_progress(datetime.now(UTC), config.campaign_ids)}
    if unknown := sorted(set(config.campaign_ids) - set(names)):
        raise dg.Failure(f"campaigns {unknown} do not exist; `nakodo campaign list` shows the campaigns")
    if tags.CAMPAIGN not in context.run.tags:
        # A batch launched by hand carries the campaigns' names too, as the sensor's do.
        context.instance.add_run_tags(context.run.run_id, {tags.CAMPAIGN: tags.campaign_names(list(names.values()))})
    # A batch launched by hand may name campaigns the sensor has not registered yet.
    apply_partitions_requests(context.instance, campaign_partitions_requests(context.instance, names.items()))
    added = 0
    for campaign_id, metadata in search_campaigns(
        store.store, context.instance, overture.off_reason, config.campaign_ids, context.log
    ):
        if why := config.reasons.get(str(campaign_id)):
            metadata["why"] = why
        added += metadata["businesses_added"]
        context.log_event(
            dg.AssetMaterialization(
                asset_key=CAMPAIGN_SEARCH,
                partition=campaign_partition(campaign_id, names[campaign_id]),
                metadata=metadata,
            )
        )
    context.log.info(
        f"Searched {plural(len(config.campaign_ids), 'campaign')}; added {plural(added, 'business', 'businesses')}"
    )


@dg.job(
    executor_def=dg.in_process_executor,
    description="Search every campaign that is due, each one materialising its campaign_search partition.",
)
def search_campaigns_job() -> None:
    search_due_campaigns()


def searched_campaign_ids(run_config: Mapping[str, Any]) -> list[int]:
    """The campaigns a stored run config of ``search_campaigns_job`` searches."""
    return run_config["ops"][search_due_campaigns.name]["config"]["campaign_ids"]
