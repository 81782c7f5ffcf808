"""What one import tells Dagster about each pair: two events (its materialisation and its check), metadata a
data engineer reads without nulls, a pair with no places said in words, and a check that catches a reader
that puts places in the wrong area."""

from __future__ import annotations

import logging
import re
from datetime import UTC, datetime

import dagster as dg
import pyarrow as pa
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.assets.places import PLACES_CHECKS
from nakodo_dagster.headless import register_partitions
from nakodo_dagster.imports.events import NEW_RELEASE_WITHIN_DRIFT_GATE, PLACES, PLACES_INSIDE_THEIR_AREA, import_events
from nakodo_dagster.imports.outcome import ImportOutcome, pair_reports
from nakodo_dagster.jobs.import_places import import_payload, import_places
from nakodo_dagster.overture.reader import PLACES_SCHEMA, ReadResult, ReadStats
from nakodo_dagster.placement import PointLocation, Targeting, cell, country_area, import_runs
from nakodo_dagster.sensors.import_sensor import import_sensor

# Leeds has cafes in the sample release; a point in the South Atlantic has nothing at all.
LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe",))
OCEAN = Targeting((PointLocation(-30.25, -20.25, 2),), ("cafe", "pub"))


def _places(rows: list[dict]) -> pa.Table:
    return pa.Table.from_pylist([{name: row.get(name) for name in PLACES_SCHEMA.names} for row in rows], PLACES_SCHEMA)


def _outcome(run, table: pa.Table, replaced_marks: dict | None = None) -> ImportOutcome:
    stats = ReadStats(rows=table.num_rows, seconds=0.1, files=1, bytes_read=2_345_678, requests=None)
    read = ReadResult(table, stats, "current")
    return ImportOutcome(run, RELEASE, pair_reports(run, table), read, 0.2, replaced_marks or {})


def _evaluations(outcome: ImportOutcome) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.partition: e for e in import_events(outcome) if isinstance(e, dg.AssetCheckEvaluation)}


def test_a_place_the_reader_puts_in_the_wrong_cell_fails_its_pairs_check():
    leeds, york = cell(53.5, -2), cell(53.5, -1.5)
    (run,) = import_runs({leeds.key: ["cafe"], york.key: ["cafe"]}, {leeds.key: leeds, york.key: york})
    table = _places(
        [
            {"id": "a", "category": "cafe", "lat": 53.8, "lng": -1.55, "area": leeds.key},
            # York's coordinates, stored under Leeds: a reader bug (a cell edge, the antimeridian, a schema change).
            {"id": "b", "category": "cafe", "lat": 53.96, "lng": -1.08, "area": leeds.key},
            {"id": "c", "category": "cafe", "lat": 53.96, "lng": -1.08, "area": york.key},
        ]
    )

    evaluations = _evaluations(_outcome(run, table))

    wrong, right = evaluations[f"{leeds.key}|cafe"], evaluations[f"{york.key}|cafe"]
    assert (wrong.check_name, wrong.passed) == (PLACES_INSIDE_THEIR_AREA, False)
    assert wrong.metadata["outside_their_area"].value == 1
    assert right.passed


def test_a_place_with_another_address_country_fails_a_countrys_check():
    switzerland = country_area("CH")
    (run,) = import_runs({switzerland.key: ["bakery"]}, {switzerland.key: switzerland})
    # Basel's box also holds Saint-Louis (FR): a place the reader kept with another country fails the check.
    table = _places(
        [
            {"id": "a", "category": "bakery", "lat": 47.56, "lng": 7.59, "country": "CH", "area": switzerland.key},
            {"id": "b", "category": "bakery", "lat": 47.59, "lng": 7.56, "country": "FR", "area": switzerland.key},
        ]
    )

    (evaluation,) = _evaluations(_outcome(run, table)).values()

    assert not evaluation.passed
    assert evaluation.metadata["outside_their_area"].value == 1


def test_a_run_writes_two_events_per_pair_and_metadata_without_nulls(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    store.add_campaign("Ocean", OCEAN)
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)

    materialised: dict[str, dg.AssetMaterialization] = {}
    for request in ticked.run_requests:
        result = import_places.execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance, resources=resources
        )
        records = instance.get_records_for_run(result.run_id, limit=None).records
        pairs = len(import_payload(request.run_config)["pairs"])
        asset_events = [
            r.event_log_entry.dagster_event
            for r in records
            if r.event_log_entry.dagster_event_type
            in (dg.DagsterEventType.ASSET_MATERIALIZATION, dg.DagsterEventType.ASSET_CHECK_EVALUATION)
        ]
        # A first import compares nothing: the drift gate's check is not evaluated.
        assert len(asset_events) == 2 * pairs, "one materialisation and one check evaluation per pair"
        for event in asset_events:
            if event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION:
                materialisation = event.step_materialization_data.materialization
                materialised[materialisation.partition] = materialisation

    assert [spec.name for spec in PLACES_CHECKS] == [PLACES_INSIDE_THEIR_AREA, NEW_RELEASE_WITHIN_DRIFT_GATE]
    assert {m.asset_key for m in materialised.values()} == {PLACES}
    for partition, materialisation in materialised.items():
        metadata = materialisation.metadata
        assert all(value.value is not None for value in metadata.values()), partition
        assert "run_http_requests" not in metadata, "a local read makes no HTTP requests"
        assert re.fullmatch(r"[\d,.]+ (bytes|kB|MB|GB)", metadata["run_read"].value)
    empty = [m for p, m in materialised.items() if p.startswith("cell:-30.5")]
    assert empty and all(m.metadata["dagster/row_count"].value == 0 for m in empty)
    assert all("a result, not a gap" in m.metadata["result"].value for m in empty)
    leeds = materialised["cell:53.5,-2|cafe"].metadata
    assert leeds["dagster/row_count"].value > 0
    assert leeds["result"].value == f"{leeds['dagster/row_count'].value:,} places"


def test_a_run_that_writes_a_pair_an_analyst_marked_meanwhile_says_so(instance, resources):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)
    (request,) = ticked.run_requests
    # An analyst re-imports the pair by hand after the sensor reserved it and before its run writes.
    store.force_request([("cell:53.5,-2", "cafe")], datetime.now(UTC))

    result = import_places.execute_in_process(
        run_config=request.run_config, tags=request.tags, instance=instance, resources=resources
    )

    records = instance.get_records_for_run(result.run_id, limit=None).records
    warnings = [r.event_log_entry.user_message for r in records if r.event_log_entry.level == logging.WARNING]
    assert any(
        "Replaced 1 pair another import was still on its way for" in w and "cafe in cell:53.5,-2" in w for w in warnings
    )
    (materialisation,) = result.asset_materializations_for_node("import_block")
    assert "still on its way" in materialisation.metadata["replaced_mark"].value
