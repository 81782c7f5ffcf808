"""The places page tells how the pairs campaigns need stand: the coverage check counts them by state, links each
failed, stale or missing pair to its partition, leaves out pairs no campaign needs, and its sensor records it only
when it changes."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import dagster as dg
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.assets.coverage import (
    INLINE_MARKDOWN_CHARS,
    LISTED_PAIRS,
    NEEDED_PAIRS_FRESH_OR_COMING,
    coverage_result,
    places_coverage_sensor,
    record_coverage,
)
from nakodo_dagster.assets.places import places
from nakodo_dagster.headless import register_partitions
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.jobs.import_places import import_payload, import_places
from nakodo_dagster.partitions import AREA, CATEGORY, places_partition
from nakodo_dagster.placement import REQUESTED, PointLocation, Targeting, areas_for
from nakodo_dagster.resources import OvertureResource
from nakodo_dagster.sensors.failure_sensor import import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.store import shared as store_shared
from nakodo_dagster.store.models import Coverage, NeededPair

# Leeds' cafes and pubs (two cells), Paris' bakeries (one cell): 5 pairs needed, 3 areas x 3 categories registered.
LEEDS = Targeting((PointLocation(53.7997, -1.5492, 10),), ("cafe", "pub"))
PARIS = Targeting((PointLocation(48.85, 2.35, 2),), ("bakery",))
NOW = datetime(2026, 12, 3, 9, 0, tzinfo=UTC)


def _broken_root(tmp_path: Path) -> str:
    folder = tmp_path / "broken" / RELEASE / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    (folder / "part-00000.zstd.parquet").write_bytes(b"PAR1 this is not a parquet file")
    return str(tmp_path / "broken")


def _import(instance: dg.DagsterInstance, resources: dict, broken: dict) -> set[tuple[str, str]]:
    """One import sensor tick; Leeds' run fails on a broken release, Paris' loads. Returns Leeds' pairs."""
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)
    leeds: set[tuple[str, str]] = set()
    for request in ticked.run_requests:
        config = import_payload(request.run_config)
        in_leeds = config["bbox"][1] > 50
        result = import_places.execute_in_process(
            run_config=request.run_config,
            tags=request.tags,
            instance=instance,
            resources=broken if in_leeds else resources,
            raise_on_error=False,
        )
        if in_leeds:
            leeds = {tuple(pair) for pair in config["pairs"]}
            (record,) = instance.get_records_for_run(result.run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
            import_failure_sensor(
                dg.build_run_status_sensor_context(
                    sensor_name=import_failure_sensor.name,
                    dagster_event=record.event_log_entry.dagster_event,
                    dagster_instance=instance,
                    dagster_run=instance.get_run_by_id(result.run_id),
                    resources=resources,
                ).for_run_failure()
            )
    return leeds


def test_the_check_counts_only_needed_pairs_and_links_the_failed_ones(instance, resources, tmp_path):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    store.add_campaign("Paris", PARIS)
    leeds = _import(instance, resources, {**resources, "overture": OvertureResource(root=_broken_root(tmp_path))})

    ticked = places_coverage_sensor(dg.build_sensor_context(instance=instance, resources=resources))

    (evaluation,) = ticked.asset_events
    assert (evaluation.asset_key, evaluation.check_name) == (PLACES, NEEDED_PAIRS_FRESH_OR_COMING)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.WARN
    counts = {name: evaluation.metadata[name].value for name in ("fresh", "on_their_way", "failed", "stale_or_missing")}
    assert counts == {"fresh": 1, "on_their_way": 0, "failed": len(leeds), "stale_or_missing": 0}
    # The grid registers every area times every category (9 partitions); only the 5 pairs campaigns need count.
    registered = len(instance.get_dynamic_partitions(AREA)) * len(instance.get_dynamic_partitions(CATEGORY))
    assert (registered, evaluation.metadata["needed_pairs"].value) == (9, 1 + len(leeds))
    failed = evaluation.metadata["failed_pairs"].value
    for area, category in leeds:
        link = f"/assets/places?view=partitions&partition={quote(str(places_partition(area, category)))}"
        assert f"- [{area} {category}]({link}): failed " in failed
    assert evaluation.metadata["stale_or_missing_pairs"].value == "none"
    assert evaluation.metadata["on_their_way_pairs"].value == "none"

    again = places_coverage_sensor(
        dg.build_sensor_context(instance=instance, resources=resources, cursor=ticked.cursor)
    )
    assert not again.asset_events
    # The import landed within the last count's overlap: looked at again, and found unchanged.
    assert again.skip_reason.skip_message.startswith(f"Unchanged: 1 of {1 + len(leeds)} pairs campaigns need are fresh")


def test_a_tick_records_each_change_and_costs_nothing_without_one(instance, resources, monkeypatch):
    # Each count looks again at what was stamped within COMMIT_OVERLAP of its start: made short enough to wait out.
    overlap = timedelta(seconds=0.5)
    monkeypatch.setattr(store_shared, "COMMIT_OVERLAP", overlap)
    store = resources["store"].store
    store.add_campaign("Paris", PARIS)
    time.sleep(overlap.total_seconds() * 2)

    first = record_coverage(store, None, datetime.now(UTC))
    (evaluation,) = first.asset_events
    assert evaluation.metadata["stale_or_missing"].value == 1

    # Nothing changed: a tick looks at no pair and records nothing.
    time.sleep(overlap.total_seconds() * 2)
    quiet = record_coverage(store, first.cursor, datetime.now(UTC))
    assert not quiet.asset_events
    assert quiet.skip_reason.skip_message == "No needed pair changed since the last tick."

    # A campaign added: the next count looks only at its pairs, and the tick records it.
    store.add_campaign("Leeds", LEEDS)
    leeds_pairs = len(areas_for(LEEDS)) * len(LEEDS.categories)
    assert store.recount_coverage(datetime.now(UTC)) == leeds_pairs
    counted = record_coverage(store, quiet.cursor, datetime.now(UTC))
    (recounted,) = counted.asset_events
    assert recounted.metadata["stale_or_missing"].value == 1 + leeds_pairs

    # The cursor of the sensor's earlier version (JSON, with the time of its count) is read as its fingerprint: the
    # result it names is the one recorded, so the tick records nothing and carries the fingerprint on. Whether this
    # count looks at Leeds' pairs again (they are within the overlap of the last count) or at none, it says so.
    legacy = json.dumps({"fingerprint": counted.cursor, "counted_at": None})
    carried = record_coverage(store, legacy, datetime.now(UTC))
    assert not carried.asset_events
    assert carried.cursor == counted.cursor


def _by_hand(instance: dg.DagsterInstance, resources: dict, partition: str) -> dg.ExecuteInProcessResult:
    """What the UI launches when an analyst materialises one partition: the asset and its checks."""
    return dg.materialize(
        [places], partition_key=partition, resources=resources, instance=instance, raise_on_error=False
    )


def _steps_and_errors(instance: dg.DagsterInstance, run_id: str) -> tuple[set[str], list[str]]:
    """The steps a run had and the text of its ERROR-level log lines."""
    logs = instance.all_logs(run_id)
    steps = {log.step_key for log in logs if log.step_key}
    errors = [log.message for log in logs if log.level >= 40]
    return steps, errors


def test_the_check_passes_once_every_needed_pair_is_fresh_and_is_recorded_by_a_partition_by_hand(instance, resources):
    store = resources["store"].store
    store.add_campaign("Paris", PARIS)
    _import(instance, resources, resources)
    (area,) = instance.get_dynamic_partitions(AREA)

    result = _by_hand(instance, resources, str(places_partition(area, "bakery")))

    assert result.success
    (evaluation,) = [e for e in result.get_asset_check_evaluations() if e.check_name == NEEDED_PAIRS_FRESH_OR_COMING]
    assert evaluation.passed
    assert [evaluation.metadata[key].value for key in ("failed_pairs", "stale_or_missing_pairs")] == ["none", "none"]
    # Recorded by the run's one step, places': no step of its own.
    assert _steps_and_errors(instance, result.run_id)[0] == {"places"}


def test_a_failed_import_by_hand_skips_no_step_and_logs_no_error_for_the_check(instance, resources, tmp_path):
    store = resources["store"].store
    store.add_campaign("Paris", PARIS)
    _import(instance, resources, resources)
    (area,) = instance.get_dynamic_partitions(AREA)
    broken = {**resources, "overture": OvertureResource(root=_broken_root(tmp_path))}

    result = _by_hand(instance, broken, str(places_partition(area, "bakery")))

    assert not result.success
    steps, errors = _steps_and_errors(instance, result.run_id)
    assert steps == {"places"}
    assert not [error for error in errors if "Not executing" in error or NEEDED_PAIRS_FRESH_OR_COMING in error]
    # The check, recorded beside the failed import, already counts its pair failed.
    (evaluation,) = [e for e in result.get_asset_check_evaluations() if e.check_name == NEEDED_PAIRS_FRESH_OR_COMING]
    assert (evaluation.passed, evaluation.metadata["failed"].value) == (False, 1)


def test_executing_the_check_alone_counts_and_imports_nothing(instance, resources):
    store = resources["store"].store
    store.add_campaign("Paris", PARIS)
    register_partitions(instance, import_sensor(dg.build_sensor_context(instance=instance, resources=resources)))

    # What the check's Execute asks for: places' op with only this check selected, no partition.
    result = dg.materialize(
        [places],
        selection=dg.AssetSelection.checks(dg.AssetCheckKey(PLACES, NEEDED_PAIRS_FRESH_OR_COMING)),
        resources=resources,
        instance=instance,
    )

    (evaluation,) = result.get_asset_check_evaluations()
    assert (evaluation.passed, evaluation.metadata["on_their_way"].value) == (True, 1)
    assert result.asset_materializations_for_node("places") == []


def test_a_long_list_stays_short_enough_to_show_inline_and_says_how_many_more():
    listed = [NeededPair(f"cell:{lat}.5,-2", "cafe", "failed", REQUESTED, NOW) for lat in range(LISTED_PAIRS)]
    coverage = Coverage({"fresh": 0, "coming": 0, "failed": 500, "missing": 0}, listed)

    passed, metadata = coverage_result(coverage)

    failed = metadata["failed_pairs"].value
    assert not passed
    assert len(failed) < INLINE_MARKDOWN_CHARS
    shown = failed.count("asked for again from")
    assert 5 <= shown < LISTED_PAIRS
    assert failed.endswith(f"- and {500 - shown} more: `nakodo imports status`")
