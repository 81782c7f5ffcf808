"""Every campaign_search materialisation shows the campaign's map, or links to the one that drew it: on a real
Dagster instance and a real store (both backends), the link followed through GraphQL as the Dagster UI asks it."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import dagster as dg
import pyarrow as pa
import pytest
from dagster_graphql.test.utils import execute_dagster_graphql

from nakodo_dagster.assets.campaign_search import CAMPAIGN_SEARCH_DESCRIPTION, campaign_search
from nakodo_dagster.campaign_map import MARKDOWN_IMAGE
from nakodo_dagster.dagster_internals import EmptyWorkspaceTarget, WorkspaceProcessContext
from nakodo_dagster.definitions import defs
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job, search_run_config
from nakodo_dagster.overture.reader import PLACES_SCHEMA
from nakodo_dagster.partitions import campaign_partition
from nakodo_dagster.placement import PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.search import CAMPAIGN_SEARCH, MAP, MAP_DRAWN_AT, MAP_SHOWS

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 10),), ("cafe",))
RELEASE = "2026-11-18.0"

# The query the asset's Events tab sends (AssetEventsQuery), with what it needs to pick and show an event.
ASSET_EVENTS = """
query AssetEvents($assetKey: AssetKeyInput!, $before: String, $partitions: [String!]) {
  assetOrError(assetKey: $assetKey) {
    __typename
    ... on Asset {
      assetEventHistory(
        limit: 100
        beforeTimestampMillis: $before
        partitions: $partitions
        eventTypeSelectors: [MATERIALIZATION, OBSERVATION, FAILED_TO_MATERIALIZE]
      ) {
        results {
          ... on MaterializationEvent {
            runId
            timestamp
            partition
            metadataEntries { label ... on MarkdownMetadataEntry { mdStr } }
          }
        }
      }
    }
  }
}
"""


def search(instance, resources, campaign_id: int) -> tuple[str, dict]:
    """One search run of the campaign, as the search sensor launches it: its run id and the map's metadata."""
    run = search_campaigns_job.execute_in_process(
        run_config=search_run_config([campaign_id]), instance=instance, resources=resources
    )
    [materialization] = run.asset_materializations_for_node("search_due_campaigns")
    return run.run_id, {key: value.value for key, value in materialization.metadata.items()}


def opened_by_the_ui(instance, url: str) -> dict:
    """The event the Dagster UI opens at the map's address: the Events tab asks for the partition's events as of
    ``asOf`` and opens the first one at or before ``time`` (its own rule, in milliseconds)."""
    address = urlsplit(url)
    assert address.path == f"/assets/{CAMPAIGN_SEARCH.to_user_string()}"
    params = {key: values[0] for key, values in parse_qs(address.query).items()}
    assert params["view"] == "events"
    with WorkspaceProcessContext(instance, EmptyWorkspaceTarget()) as process:
        answer = execute_dagster_graphql(
            process.create_request_context(),
            ASSET_EVENTS,
            {
                "assetKey": {"path": CAMPAIGN_SEARCH.path},
                "before": str(int(params["asOf"]) + 1),
                "partitions": [params["partitions[0]"]],
            },
        )
    events = answer.data["assetOrError"]["assetEventHistory"]["results"]
    newest_first = sorted(events, key=lambda event: -int(event["timestamp"]))
    return next(event for event in newest_first if int(event["timestamp"]) <= int(params["time"]))


def event_map(event: dict) -> str:
    return next(entry["mdStr"] for entry in event["metadataEntries"] if entry["label"] == MAP)


def land_nothing(store, targeting: Targeting) -> None:
    """Every area of the targeting imported, with no place in it: the map's cells turn from missing to loaded."""
    areas = areas_for(targeting)
    [run] = import_runs({area: list(targeting.categories) for area in areas}, areas)
    store.write_import(run, RELEASE, pa.Table.from_pylist([], schema=PLACES_SCHEMA), datetime.now(UTC))


def test_every_search_shows_the_map_or_links_to_the_one_that_drew_it(instance, resources):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    instance.add_dynamic_partitions("campaign", [campaign_partition(leeds, "Leeds")])

    drew, first = search(instance, resources, leeds)
    _, second = search(instance, resources, leeds)
    _, third = search(instance, resources, leeds)

    assert first[MAP].startswith(MARKDOWN_IMAGE)
    assert second["businesses_added"] == third["businesses_added"] == 0
    assert second[MAP_SHOWS] == third[MAP_SHOWS] == first[MAP_SHOWS]
    for linked in (second, third):
        opened = opened_by_the_ui(instance, linked[MAP])
        assert opened["runId"] == drew, "the link opens the materialisation that drew the map"
        assert int(linked[MAP_DRAWN_AT] * 1000) == int(opened["timestamp"]), "and says when it was drawn"
        assert opened["partition"] == campaign_partition(leeds, "Leeds")
        assert event_map(opened).startswith(MARKDOWN_IMAGE)
    assert third[MAP] == second[MAP], "a link is passed on, not chained to the last link"

    land_nothing(store, LEEDS)
    _, landed = search(instance, resources, leeds)

    assert landed[MAP_SHOWS] != first[MAP_SHOWS]
    assert landed[MAP].startswith(MARKDOWN_IMAGE), "what the map shows changed: drawn again"


def test_a_link_opens_its_own_campaign_among_many_logged_in_the_same_run(instance, resources):
    store = resources["store"].store
    campaigns = [store.add_campaign(f"Leeds {number}", LEEDS) for number in range(3)]
    instance.add_dynamic_partitions(
        "campaign", [campaign_partition(campaign, f"Leeds {number}") for number, campaign in enumerate(campaigns)]
    )
    config = search_run_config(campaigns)
    drew = search_campaigns_job.execute_in_process(run_config=config, instance=instance, resources=resources)

    again = search_campaigns_job.execute_in_process(run_config=config, instance=instance, resources=resources)

    for materialization in again.asset_materializations_for_node("search_due_campaigns"):
        opened = opened_by_the_ui(instance, materialization.metadata[MAP].value)
        assert (opened["runId"], opened["partition"]) == (drew.run_id, materialization.partition)
        assert event_map(opened).startswith(MARKDOWN_IMAGE)


@pytest.mark.parametrize("database_url", ["duckdb"], indirect=True)
def test_a_search_materialised_by_hand_draws_its_map_and_the_asset_says_where_to_look(
    instance, resources, database_url
):
    store = resources["store"].store
    leeds = store.add_campaign("Leeds", LEEDS)
    key = campaign_partition(leeds, "Leeds")
    instance.add_dynamic_partitions("campaign", [key])
    search(instance, resources, leeds)

    result = dg.materialize([campaign_search], partition_key=key, instance=instance, resources=resources)

    [materialization] = result.asset_materializations_for_node("campaign_search")
    assert materialization.metadata[MAP].value.startswith(MARKDOWN_IMAGE), "an analyst sees the map at once"
    description = defs.resolve_assets_def(CAMPAIGN_SEARCH).specs_by_key[CAMPAIGN_SEARCH].description
    assert description == CAMPAIGN_SEARCH_DESCRIPTION
    assert f"`{MAP}`" in description
