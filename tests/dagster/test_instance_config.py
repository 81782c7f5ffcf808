"""The project's dagster.yaml, loaded by a real instance, is what keeps imports two at a time and drains the
queue without idle gaps."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from nakodo_dagster import tags
from nakodo_dagster.assets.places import IMPORT_POOL, places
from nakodo_dagster.jobs.import_places import import_places

DAGSTER_YAML = Path(__file__).parents[2] / "nakodo_dagster" / "data" / "dagster.yaml"


def test_the_project_instance_runs_two_imports_at_a_time():
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance:
        config = instance.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 2
        limits = config.run_queue_config.tag_concurrency_limits
        assert {"key": tags.KIND, "value": tags.IMPORT_KIND, "limit": 2} in limits
    assert import_places.tags[tags.KIND] == tags.IMPORT_KIND
    assert import_places.graph.node_defs[0].pool == IMPORT_POOL
    assert places.op.pool == IMPORT_POOL


def test_the_queue_launches_a_freed_slot_within_a_second():
    settings = yaml.safe_load(DAGSTER_YAML.read_text())
    with dg.instance_for_test(overrides=settings) as instance:
        coordinator = instance.run_coordinator
        assert isinstance(coordinator, dg.QueuedRunCoordinator)
        assert coordinator.dequeue_interval_seconds == 1
        assert coordinator.dequeue_use_threads
        assert coordinator.dequeue_num_workers == 2
