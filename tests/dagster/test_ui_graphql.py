"""The UI's questions over GraphQL, on the code location loaded by a code server as the webserver loads it: each
asset's page lists the sensor that keeps it fresh, and an analyst's backfill of places partitions runs as block
runs that re-read every chosen pair, fresh or not."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.execution.backfill import BulkActionStatus
from dagster._core.workspace.context import WorkspaceProcessContext
from dagster._core.workspace.load_target import WorkspaceFileTarget
from dagster._daemon.backfill import execute_backfill_iteration
from dagster_graphql.client.query import LAUNCH_PARTITION_BACKFILL_MUTATION
from dagster_graphql.test.utils import execute_dagster_graphql
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.assets.places import BACKFILL_PAIRS_PER_RUN
from nakodo_dagster.headless import sync
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.partitions import places_partition
from nakodo_dagster.placement import PointLocation, Targeting, areas_for, block_key
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.search import CAMPAIGN_SEARCH
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import search_sensor
from nakodo_dagster.store import open_store

# Seven cells of one 4 x 4 block (latitudes 52 to 54, longitudes -2 to 0), three categories: 21 pairs.
BLOCK = Targeting(
    tuple(
        PointLocation(lat, lng, 2)
        for lat, lng in [
            (52.25, -1.75),
            (52.25, -1.25),
            (52.75, -1.75),
            (52.75, -0.75),
            (53.25, -1.25),
            (53.25, -0.25),
            (53.75, -0.25),
        ]
    ),
    ("bakery", "cafe", "pub"),
)
# A cell of the next block east, whose key sorts among the block's own ("cell:52,0" between "cell:52,-2" and
# "cell:52.5,-1.75"): registered in key order, it would split the block's partitions in two stretches.
NEIGHBOUR = Targeting((PointLocation(52.25, 0.25, 2),), ("cafe",))
BACKFILL_SECONDS = 180


@pytest.fixture
def backfill_instance() -> Iterator[dg.DagsterInstance]:
    """A Dagster instance that runs each launched run to its end in this process, two import slots."""
    overrides = {"concurrency": {"pools": {"default_limit": 2}}}
    with dg.instance_for_test(
        overrides=overrides, synchronous_run_launcher=True, synchronous_run_coordinator=True
    ) as instance:
        yield instance


@contextmanager
def _loaded(instance: dg.DagsterInstance, folder: Path) -> Iterator[WorkspaceProcessContext]:
    path = folder / "workspace.yaml"
    location = {"module_name": "nakodo_dagster.definitions", "working_directory": str(folder)}
    path.write_text(yaml.safe_dump({"load_from": [{"python_module": location}]}))
    with WorkspaceProcessContext(instance, WorkspaceFileTarget([str(path)])) as context:
        yield context


@pytest.fixture
def workspace(tmp_path, backfill_instance, duckdb_url, release_root, monkeypatch) -> Iterator[WorkspaceProcessContext]:
    """The project's code location on a store and the sample release, loaded by a code server."""
    monkeypatch.setenv("NAKODO_DATABASE", duckdb_url)
    monkeypatch.setenv("NAKODO_OVERTURE_ROOT", release_root)
    monkeypatch.setenv("NAKODO_OVERTURE_RELEASE", "")
    with _loaded(backfill_instance, tmp_path) as context:
        yield context


ASSET_AUTOMATIONS = """
query {
  assetNodes {
    assetKey { path }
    targetingInstigators { __typename ... on Sensor { name } ... on Schedule { name } }
  }
}
"""


def test_each_asset_page_lists_the_sensor_that_keeps_it_fresh(instance, tmp_path):
    with _loaded(instance, tmp_path) as context:
        result = execute_dagster_graphql(context.create_request_context(), ASSET_AUTOMATIONS)

    # What the asset page's Automations tab reads.
    automations = {
        tuple(node["assetKey"]["path"]): {(i["__typename"], i["name"]) for i in node["targetingInstigators"]}
        for node in result.data["assetNodes"]
    }
    assert automations[tuple(PLACES.path)] == {("Sensor", import_sensor.name)}
    assert automations[tuple(CAMPAIGN_SEARCH.path)] == {("Sensor", search_sensor.name)}


BACKFILL_POLICY = """
query {
  assetNodes { assetKey { path } backfillPolicy { description } }
}
"""


def _launch_backfill(workspace: WorkspaceProcessContext, partitions: list[str]) -> str:
    """Launch a backfill as the UI's Materialize dialog does, with the GraphQL mutation it sends."""
    params = {"assetSelection": [{"path": PLACES.path}], "partitionNames": partitions, "fromFailure": False}
    result = execute_dagster_graphql(
        workspace.create_request_context(), LAUNCH_PARTITION_BACKFILL_MUTATION, {"backfillParams": params}
    )
    launched = result.data["launchPartitionBackfill"]
    assert launched["__typename"] == "LaunchBackfillSuccess", launched
    return launched["backfillId"]


def _run_backfill(workspace: WorkspaceProcessContext, backfill_id: str) -> None:
    """The daemon's backfill iterations until the backfill is done; each run it launches runs here to its end."""
    instance = workspace.instance
    deadline = time.monotonic() + BACKFILL_SECONDS
    while instance.get_backfill(backfill_id).status == BulkActionStatus.REQUESTED:
        assert time.monotonic() < deadline, f"the backfill was not done in {BACKFILL_SECONDS} s"
        errors = [error for error in execute_backfill_iteration(workspace, logging.getLogger("backfill")) if error]
        assert not errors, errors[0]


# Dagster's own backfill code calls a function it deprecated; nothing this project calls.
@pytest.mark.filterwarnings("ignore:Function `AssetSelection.sources` is deprecated:DeprecationWarning")
def test_a_backfill_runs_as_block_runs_and_re_reads_every_pair(workspace, backfill_instance, duckdb_url, release_root):
    store = open_store(duckdb_url)
    store.migrate()
    store.add_campaign("Midlands", BLOCK)
    store.add_campaign("Norfolk", NEIGHBOUR)
    areas, (norfolk,) = areas_for(BLOCK), areas_for(NEIGHBOUR)
    assert len(areas) == 7 and {block_key(area) for area in areas.values()} == {"block:52,-2"}
    # The import sensor loads both blocks first: every pair is fresh when the analyst asks for it again.
    synced = sync(backfill_instance, StoreResource(database=duckdb_url), OvertureResource(root=release_root))
    assert synced.import_runs == 2 and not synced.failed_runs
    # The block's 21 pairs, and the cafes of the cell next door.
    pairs = [(area, category) for area in sorted(areas) for category in BLOCK.categories] + [(norfolk, "cafe")]
    before = {(r.area, r.category): r for r in store.import_rows([*areas, norfolk], BLOCK.categories)}
    assert set(before) == set(pairs)
    runs_before = backfill_instance.get_runs_count()

    backfill_id = _launch_backfill(workspace, [str(places_partition(*pair)) for pair in pairs])
    _run_backfill(workspace, backfill_id)

    assert backfill_instance.get_backfill(backfill_id).status == BulkActionStatus.COMPLETED_SUCCESS
    runs = backfill_instance.get_runs(dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
    # One run per category, not one per pair: Dagster makes a run of each stretch of neighbouring partitions, and
    # each block's cells are neighbours in the area dimension.
    assert len(runs) == len(BLOCK.categories), [run.tags for run in runs]
    assert backfill_instance.get_runs_count() - runs_before == len(runs)
    assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
    # What the launch dialog said of them is what they did: several runs, none past the policy's maximum.
    policy = execute_dagster_graphql(workspace.create_request_context(), BACKFILL_POLICY).data["assetNodes"]
    (said,) = [node["backfillPolicy"]["description"] for node in policy if node["assetKey"]["path"] == PLACES.path]
    assert said == f"Backfills in multiple runs, with a maximum of {BACKFILL_PAIRS_PER_RUN} partitions per run"
    assert all(len(_materialised(backfill_instance, run.run_id)) <= BACKFILL_PAIRS_PER_RUN for run in runs)
    # Nothing in the runs' logs a person would take for a fault.
    logs = [entry for run in runs for entry in backfill_instance.all_logs(run.run_id)]
    assert not [e.user_message for e in logs if e.level >= logging.WARNING or "did not yield" in e.user_message]
    # The cafes' run imported both blocks, one after the other.
    planned = {
        run.tags["dagster/asset_partition_range_start"].split("|")[1]: _materialised(backfill_instance, run.run_id)
        for run in runs
    }
    assert planned["cafe"] == {str(places_partition(area, "cafe")) for area in [*areas, norfolk]}
    # Every pair read again from the release, fresh as it was, and its partition says what it had before.
    after = {(r.area, r.category): r for r in store.import_rows([*areas, norfolk], BLOCK.categories)}
    assert all(after[pair].release == RELEASE and after[pair].imported_at > before[pair].imported_at for pair in pairs)
    [record] = backfill_instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=PLACES, asset_partitions=[str(places_partition(norfolk, "cafe"))]), limit=1
    ).records
    had = before[(norfolk, "cafe")]
    assert record.asset_materialization.metadata["replaced"].value.startswith(f"release {RELEASE}, {had.rows:,} places")


def _materialised(instance: dg.DagsterInstance, run_id: str) -> set[str]:
    """The partitions of places a run materialised."""
    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION, limit=None)
    return {record.event_log_entry.dagster_event.partition for record in records.records}
