"""A failed import shows exactly its pairs as failed partitions of places, with its error, in the partition status
the UI reads; the import that later loads them turns them materialised; a successful import writes no extra
events for it."""

from __future__ import annotations

import os
import shutil
import struct
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg
import pytest
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.assets.places import places
from nakodo_dagster.headless import register_partitions
from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.jobs.import_places import import_block, import_payload, import_places
from nakodo_dagster.partitions import AREA, CATEGORY, PLACES_PARTITIONS, places_partition
from nakodo_dagster.placement import Cutoffs, PointLocation, Targeting
from nakodo_dagster.resources import OvertureResource
from nakodo_dagster.sensors.failure_sensor import import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor

# Leeds, two categories: one block run; Paris is another run whose pairs must stay untouched.
LEEDS = Targeting((PointLocation(53.7997, -1.5492, 10),), ("cafe", "pub"))
PARIS = Targeting((PointLocation(48.85, 2.35, 2),), ("bakery",))


def _broken_root(tmp_path: Path) -> str:
    """A root whose release has one Parquet file that is not Parquet at all: every read of it fails."""
    folder = tmp_path / "broken" / RELEASE / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    (folder / "part-00000.zstd.parquet").write_bytes(b"PAR1 this is not a parquet file")
    return str(tmp_path / "broken")


def _partition_status(instance: dg.DagsterInstance) -> tuple[set[str], set[str]]:
    """The materialised and the failed partitions of places, as the UI's partition status reads them."""
    keys = PLACES_PARTITIONS.get_partition_keys(dynamic_partitions_store=instance)
    status = instance.get_status_by_partition(PLACES, keys, PLACES_PARTITIONS) or {}
    return (
        {key for key, state in status.items() if state == dg.AssetPartitionStatus.MATERIALIZED},
        {key for key, state in status.items() if state == dg.AssetPartitionStatus.FAILED},
    )


def _run_failure_sensor(instance: dg.DagsterInstance, resources: dict, run_id: str) -> None:
    """One evaluation of the failure sensor for this failed run, as the daemon makes it."""
    (record,) = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.RUN_FAILURE).records
    context = dg.build_run_status_sensor_context(
        sensor_name=import_failure_sensor.name,
        dagster_event=record.event_log_entry.dagster_event,
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(run_id),
        resources=resources,
    ).for_run_failure()
    import_failure_sensor(context)


def _planned(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """The partitions of places a run was recorded as planning to materialise."""
    records = instance.get_records_for_run(
        run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED, limit=None
    ).records
    return sorted(r.event_log_entry.dagster_event.partition for r in records)


def test_a_failed_import_shows_its_pairs_failed_with_the_error_until_an_import_loads_them(
    instance, resources, tmp_path
):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    store.add_campaign("Paris", PARIS)
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)
    by_box = {tuple(import_payload(r.run_config)["bbox"])[1] > 50: r for r in ticked.run_requests}
    leeds, paris = by_box[True], by_box[False]
    leeds_pairs = {str(places_partition(a, c)) for a, c in import_payload(leeds.run_config)["pairs"]}
    broken = {**resources, "overture": OvertureResource(root=_broken_root(tmp_path))}

    failed = import_places.execute_in_process(
        run_config=leeds.run_config, tags=leeds.tags, instance=instance, resources=broken, raise_on_error=False
    )
    assert not failed.success
    paris_run = import_places.execute_in_process(
        run_config=paris.run_config, tags=paris.tags, instance=instance, resources=resources
    )
    _run_failure_sensor(instance, resources, failed.run_id)

    materialised, failed_partitions = _partition_status(instance)
    assert failed_partitions == leeds_pairs
    assert not materialised & leeds_pairs and materialised, "Paris' pair is materialised, Leeds' are not"
    # Each failed partition leads to the failed run (its planned event's), whose step failure says what went wrong.
    assert _planned(instance, failed.run_id) == sorted(leeds_pairs)
    (step_failure,) = instance.get_records_for_run(failed.run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
    failure = step_failure.event_log_entry.dagster_event.step_failure_data
    headline, next_step = failure.error.message.strip().splitlines()[:2]
    assert headline.endswith(
        f"Overture release {RELEASE}: file part-00000.zstd.parquet is unreadable (truncated or not Parquet)"
    )
    first_area, first_category = sorted(import_payload(leeds.run_config)["pairs"])[0]
    # What to do first: a retry alone reads the same broken file again.
    assert next_step.startswith(
        f"Replace file part-00000.zstd.parquet with a whole copy, check the release with `nakodo overture check "
        f"{RELEASE}`"
    ), next_step
    assert next_step.endswith(
        f"then retry: `nakodo imports retry {first_area} {first_category}` (and the same for the 3 other pairs)."
    ), next_step
    assert failure.user_failure_data.metadata["file"].value == "part-00000.zstd.parquet"
    assert failure.user_failure_data.metadata["attempts"].value == 1, "an unreadable file is not tried again"
    assert "is cut short or not a Parquet file" in failure.error.to_string()
    # Nothing unrelated in the error's chain: no "no running event loop" from how the reader runs its requests.
    assert "event loop" not in failure.error.to_string()
    logged = " ".join(
        str(record.event_log_entry.message) + str(record.event_log_entry.user_message)
        for record in instance.get_records_for_run(failed.run_id, limit=None).records
    )
    assert "event loop" not in logged
    # The failure costs one event per pair; a successful import nothing beyond its own two per pair.
    assert _planned(instance, paris_run.run_id) == []

    # The release is mended and the block imported again (an analyst's retry, or the sensor a week later).
    mended = import_places.execute_in_process(
        run_config=leeds.run_config, tags=leeds.tags, instance=instance, resources=resources
    )
    assert mended.success
    materialised, failed_partitions = _partition_status(instance)
    assert failed_partitions == set()
    assert leeds_pairs <= materialised


def test_a_run_that_failed_on_a_bad_payload_shows_no_partition(instance, resources):
    payload = {
        "areas": ["tile:53.5,-2"],
        "categories": ["cafe"],
        "bbox": [-2, 53.5, -1.5, 54],
        "pairs": [["tile:53.5,-2", "cafe"]],
    }
    failed = import_places.execute_in_process(
        run_config={"ops": {import_block.name: {"config": payload}}},
        instance=instance,
        resources=resources,
        raise_on_error=False,
    )

    assert not failed.success
    _run_failure_sensor(instance, resources, failed.run_id)
    assert _planned(instance, failed.run_id) == []
    assert _partition_status(instance) == (set(), set())


def test_a_failed_re_import_by_hand_shows_its_partition_failed(instance, resources, tmp_path):
    area, category = "cell:53.5,-2", "cafe"
    instance.add_dynamic_partitions(AREA, [area])
    instance.add_dynamic_partitions(CATEGORY, [category])
    broken = {**resources, "overture": OvertureResource(root=_broken_root(tmp_path))}

    # What the UI launches for one partition: Dagster itself records the partition it plans, so no sensor is needed.
    result = dg.materialize(
        [places], partition_key=f"{area}|{category}", resources=broken, instance=instance, raise_on_error=False
    )

    assert not result.success
    assert _partition_status(instance) == (set(), {f"{area}|{category}"})


def _overwrite_data_pages(root: Path) -> list[str]:
    """Every Parquet file of the release with its data pages replaced by noise, its magic, footer, size and time
    kept (as a disk or a copy gone wrong leaves it): its index still holds, reading its pages fails. Their names."""
    names = []
    for path in sorted(root.rglob("*.parquet")):
        body, times = path.read_bytes(), path.stat()
        (footer,) = struct.unpack("<I", body[-8:-4])
        path.write_bytes(body[:4] + os.urandom(len(body) - footer - 12) + body[-footer - 8 :])
        os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
        names.append(path.name)
    return names


def test_a_re_import_by_hand_of_a_file_with_broken_pages_names_the_file(instance, resources, release_root, tmp_path):
    area, category = "cell:53.5,-2", "cafe"
    instance.add_dynamic_partitions(AREA, [area])
    instance.add_dynamic_partitions(CATEGORY, [category])
    root = tmp_path / "overture"
    shutil.copytree(release_root, root)
    copied = {**resources, "overture": OvertureResource(root=str(root))}
    loaded = dg.materialize([places], partition_key=f"{area}|{category}", resources=copied, instance=instance)
    (materialization,) = loaded.asset_materializations_for_node("places")
    assert materialization.metadata["dagster/row_count"].value > 0

    names = _overwrite_data_pages(root)
    result = dg.materialize(
        [places], partition_key=f"{area}|{category}", resources=copied, instance=instance, raise_on_error=False
    )

    assert not result.success
    (failure,) = result.get_step_failure_events()
    headline = failure.step_failure_data.error.message.splitlines()[0]
    assert "is unreadable" in headline
    assert any(f"file {name} is unreadable" in headline for name in names), headline


def import_from_broken_release(
    instance: dg.DagsterInstance, resources: dict, tmp_path: Path, targeting: Targeting
) -> tuple[dg.RunRequest, dg.ExecuteInProcessResult]:
    """A campaign's one import run, asked for by the import sensor, run on a release whose only file is not Parquet:
    its request and its (failed) result."""
    resources["store"].store.add_campaign("Campaign", targeting)
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)
    (request,) = ticked.run_requests
    broken = {**resources, "overture": OvertureResource(root=_broken_root(tmp_path))}
    result = import_places.execute_in_process(
        run_config=request.run_config, tags=request.tags, instance=instance, resources=broken, raise_on_error=False
    )
    return request, result


def test_a_failure_seen_after_a_later_import_loaded_the_pairs_does_not_show_them_failed(instance, resources, tmp_path):
    request, failed = import_from_broken_release(instance, resources, tmp_path, PARIS)
    # An analyst's import loads the pair before the failure sensor's next tick looks at the failed run.
    import_places.execute_in_process(run_config=request.run_config, instance=instance, resources=resources)

    _run_failure_sensor(instance, resources, failed.run_id)

    assert _planned(instance, failed.run_id) == []
    materialised, failed_partitions = _partition_status(instance)
    assert (len(materialised), failed_partitions) == (1, set())


def test_a_failed_backfill_run_shows_its_partitions_failed_and_its_pairs_failed(instance, resources, tmp_path):
    cells, category = ["cell:53.5,-2", "cell:53.5,-1.5", "cell:53,-2"], "cafe"
    instance.add_dynamic_partitions(AREA, cells)
    instance.add_dynamic_partitions(CATEGORY, [category])
    broken = {**resources, "overture": OvertureResource(root=_broken_root(tmp_path))}
    partitions = {f"{cell}|{category}" for cell in cells}

    # What a backfill launches for a stretch of partitions: one run over their range.
    result = dg.materialize(
        [places],
        tags={
            "dagster/asset_partition_range_start": f"{cells[0]}|{category}",
            "dagster/asset_partition_range_end": f"{cells[-1]}|{category}",
        },
        resources=broken,
        instance=instance,
        raise_on_error=False,
    )

    assert not result.success
    assert _partition_status(instance) == (set(), partitions)
    # The step's failure says what failed, as an import run's does; the pairs read as failed at once.
    (step_failure,) = instance.get_records_for_run(result.run_id, of_type=dg.DagsterEventType.STEP_FAILURE).records
    headline = step_failure.event_log_entry.dagster_event.step_failure_data.error.message.strip().splitlines()[0]
    assert headline.endswith(
        f"Overture release {RELEASE}: file part-00000.zstd.parquet is unreadable (truncated or not Parquet)"
    )
    store = resources["store"].store
    cutoffs = Cutoffs.at(datetime.now(UTC))
    assert {cutoffs.row_state(r) for r in store.import_rows(cells, [category])} == {"failed"}


@pytest.mark.parametrize(
    ("area", "category", "why"),
    [
        ("Leeds", "cafe", "area 'Leeds' is not allowed: use 'cell:LAT,LNG'"),
        ("cell:53.3,-2", "cafe", "area 'cell:53.3,-2' is not allowed"),
        ("cell:53.5,-2", "Cafés", "category 'Cafés' is not allowed: use Overture's plain names"),
    ],
)
def test_a_partition_key_added_by_hand_that_is_no_pair_is_refused_and_imports_nothing(
    instance, resources, area, category, why
):
    # The partition list's "Add partition" registers whatever it is given.
    instance.add_dynamic_partitions(AREA, [area])
    instance.add_dynamic_partitions(CATEGORY, [category])
    key = f"{area}|{category}"

    result = dg.materialize([places], partition_key=key, resources=resources, instance=instance, raise_on_error=False)

    assert not result.success
    (failure,) = result.get_step_failure_events()
    message = failure.step_failure_data.error.message
    assert f"places partition {key!r} is not an (area, category) pair, so nothing was imported: {why}" in message
    store = resources["store"].store
    assert store.import_rows({area, "cell:53.5,-2"}, {category, "cafe"}) == [], "nothing marked, nothing read"
    assert not result.get_asset_materialization_events()
