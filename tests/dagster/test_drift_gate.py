"""The drift gate end to end: a campaign imported from one sample release, then a month on from the next, which
drops bakeries and inflates pubs. The import sensor's runs hold exactly the pairs an independent reading of the two
releases (pyarrow, row by row) says moved too far; campaigns keep the old places of those; the UI shows each held pair
as a warning with its numbers; an analyst accepts one with the command line and one with an accept run config."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import pytest
from overture_helpers import CURRENT, PREVIOUS

from bench.independent import expected_rows
from nakodo_dagster import tags
from nakodo_dagster.assets.places import places
from nakodo_dagster.dagster_internals import PartitionKeyFilter
from nakodo_dagster.drift import DriftLimits, PairDrift, drift_reasons
from nakodo_dagster.headless import register_partitions
from nakodo_dagster.imports.events import NEW_RELEASE_WITHIN_DRIFT_GATE, PLACES
from nakodo_dagster.jobs.import_places import import_payload, import_places
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job, search_run_config
from nakodo_dagster.overture.sample import ReleaseDrift, write_sample_release
from nakodo_dagster.partitions import places_partition
from nakodo_dagster.placement import FRESH_DAYS, ImportRun, PointLocation, Targeting
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.import_sensor import request_import_runs

PARIS = Targeting((PointLocation(48.8566, 2.3522, 25),), ("bakery", "cafe", "pub"))
CENTRE = "cell:48.5,2"
NAKODO = str(Path(sys.executable).with_name("nakodo"))


@pytest.fixture(scope="module")
def two_releases(tmp_path_factory) -> Path:
    """PREVIOUS, and CURRENT a month later: the same places by id, 3% churn, bakeries dropped, pubs inflated."""
    root = tmp_path_factory.mktemp("releases")
    sample = {"rows": 20_000, "files": 4, "row_group_rows": 500, "seed": 7, "progress": False}
    write_sample_release(root, release=PREVIOUS, **sample)
    write_sample_release(root, release=CURRENT, drift=ReleaseDrift(drop=("bakery",), inflate=("pub",)), **sample)
    return root


def _import(instance, store: StoreResource, root: Path, release: str, now: datetime) -> list[dg.ExecuteInProcessResult]:
    """One import sensor look at ``now``, reading ``release``, and every run it asks for, executed."""
    overture = OvertureResource(root=str(root), release=release)
    resources = {"store": store, "overture": overture}
    result = request_import_runs(instance, store.store, overture, now, logging.getLogger("test"))
    register_partitions(instance, result)
    return [
        import_places.execute_in_process(
            run_config=request.run_config, tags=request.tags, instance=instance, resources=resources
        )
        for request in result.run_requests
    ]


def _expected(root: Path, runs: list[ImportRun]) -> dict[tuple[str, str], PairDrift]:
    """Each pair's numbers from the two releases alone: pyarrow rows, Python sets, numpy medians."""
    expected = {}
    for run in runs:
        before, after = (expected_rows(root, release, run) for release in (PREVIOUS, CURRENT))
        for pair in run.pairs:
            old = [r for r in before if (r[10], r[2]) == pair]
            new = [r for r in after if (r[10], r[2]) == pair]
            if not old:
                continue
            kept = len({r[0] for r in old} & {r[0] for r in new})
            medians = [
                float(np.median(values)) if (values := [r[5] for r in rows if r[5] <= 1]) else None
                for rows in (old, new)
            ]
            expected[pair] = PairDrift(PREVIOUS, CURRENT, len(old), len(new), kept, *medians)
    return expected


def _ids(store, area: str, category: str) -> set[str]:
    rows = store._transact(
        lambda tx: tx.rows("SELECT id FROM places WHERE area = $a AND category = $c", a=area, c=category)
    )
    return {row[0] for row in rows}


def _drift_check(instance, area: str, category: str) -> str:
    """The latest status of the pair's drift check: SUCCEEDED, FAILED, or none if never evaluated."""
    key = dg.AssetCheckKey(PLACES, NEW_RELEASE_WITHIN_DRIFT_GATE)
    partition = PartitionKeyFilter(key=str(places_partition(area, category)))
    record = instance.event_log_storage.get_latest_asset_check_execution_by_key([key], partition).get(key)
    return record.status.value if record else "none"


def _search(instance, resources: dict, campaign_id: int) -> set[str]:
    search_campaigns_job.execute_in_process(
        run_config=search_run_config([campaign_id]), instance=instance, resources=resources
    )
    return {row["id"] for row in resources["store"].store.campaign_results(campaign_id)}


def test_a_bad_release_is_held_until_an_analyst_accepts_it(instance, database_url, two_releases, tmp_path):
    store_resource = StoreResource(database=database_url)
    store = store_resource.store
    campaign = store.add_campaign("Paris", PARIS)
    now = datetime.now(UTC)

    first = _import(instance, store_resource, two_releases, PREVIOUS, now)
    assert first and all(result.success for result in first)
    runs = [ImportRun.from_payload(import_payload(r.dagster_run.run_config)) for r in first]
    old = {pair: _ids(store, *pair) for run in runs for pair in run.pairs}
    resources = {"store": store_resource, "overture": OvertureResource(root=str(two_releases), release=CURRENT)}
    searched = _search(instance, resources, campaign)
    assert searched

    # A month on, the pairs are stale and the sensor reads them from the next release.
    later = _import(instance, store_resource, two_releases, CURRENT, now + timedelta(days=FRESH_DAYS + 1))
    assert later and all(result.success for result in later)

    expected = _expected(two_releases, runs)
    expected_held = {pair for pair, drift in expected.items() if drift_reasons(drift, DriftLimits())}
    held = {(h.area, h.category): h for h in store.held_imports()}
    # The sample's drop and inflation, and nothing else: cafes churned 3 % and stay.
    assert {(CENTRE, "bakery"), (CENTRE, "pub")} <= expected_held
    assert (CENTRE, "cafe") not in expected_held
    assert set(held) == expected_held
    for pair, h in held.items():
        numbers = lambda d: (d.before, d.after, d.kept, d.confidence_before, d.confidence_after)  # noqa: E731
        assert numbers(h.drift) == pytest.approx(numbers(expected[pair])), pair
    bakery, pub = held[(CENTRE, "bakery")].drift, held[(CENTRE, "pub")].drift
    assert bakery.count_change < -0.5 and pub.count_change > 0.5

    # Campaigns keep the previous release's places of the held pairs; the rest moved on.
    imports = {(r.area, r.category): r for r in store.import_rows([p[0] for p in old], ["bakery", "cafe", "pub"])}
    for pair in old:
        if pair in held:
            assert _ids(store, *pair) == old[pair], pair
            assert (imports[pair].release, imports[pair].rows) == (PREVIOUS, len(old[pair]))
        else:
            assert imports[pair].release == CURRENT
    assert _ids(store, CENTRE, "cafe") != old[(CENTRE, "cafe")]
    after_search = _search(instance, resources, campaign)
    new_pubs = _ids(store, CENTRE, "pub") | {
        r[0] for r in expected_rows(two_releases, CURRENT, runs[0]) if r[2] == "pub" and r[10] == CENTRE
    }
    assert not (after_search - searched) & (new_pubs - old[(CENTRE, "pub")]), "no pub of the held release was added"

    # The UI: a warning per held pair, with its numbers; a pass for a compared pair within the limits; the run's tag.
    evaluations = {}
    for result in later:
        records = instance.get_records_for_run(result.run_id, limit=None).records
        for record in records:
            event = record.event_log_entry.dagster_event
            if event and event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION:
                data = event.event_specific_data
                if data.check_name == NEW_RELEASE_WITHIN_DRIFT_GATE:
                    evaluations[data.partition] = data
    centre_bakery = evaluations[str(places_partition(CENTRE, "bakery"))]
    assert (centre_bakery.passed, centre_bakery.severity) == (False, dg.AssetCheckSeverity.WARN)
    assert centre_bakery.metadata["places_before"].value == bakery.before
    assert centre_bakery.metadata["places_after"].value == bakery.after
    assert centre_bakery.metadata["accept"].value == f"nakodo imports accept {CENTRE} bakery"
    assert evaluations[str(places_partition(CENTRE, "cafe"))].passed
    assert [_drift_check(instance, CENTRE, c) for c in ("bakery", "cafe", "pub")] == ["FAILED", "SUCCEEDED", "FAILED"]
    tagged = [r.dagster_run.tags.get(tags.HELD) for r in later]
    assert any(tag and "bakery in cell:48.5,2" in tag for tag in tagged)
    (materialisation,) = [
        m
        for r in later
        for m in r.asset_materializations_for_node("import_block")
        if m.partition == str(places_partition(CENTRE, "bakery"))
    ]
    assert materialisation.metadata["release"].value == PREVIOUS
    assert materialisation.metadata["held_release"].value == CURRENT

    # `nakodo imports status` lists the held pairs with their numbers, as a user runs it.
    env = {**os.environ, "NAKODO_DATABASE": database_url}
    status = subprocess.run(
        [NAKODO, "imports", "status"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert status.returncode == 0, status.stderr
    assert f"Held at the drift gate ({len(held)} pair" in status.stdout
    line = next(line for line in status.stdout.splitlines() if line.startswith("bakery") and CENTRE in line)
    assert f"{PREVIOUS}: {bakery.before:,}" in line and f"{CURRENT}: {bakery.after:,}" in line
    assert f"nakodo imports accept {CENTRE} bakery" in line

    # The analyst accepts the pubs from the command line ...
    accepted = subprocess.run(
        [NAKODO, "imports", "accept", CENTRE, "pub"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert accepted.returncode == 0, accepted.stderr
    assert f"Accepted release {CURRENT} for pub in {CENTRE}: its {pub.after:,} places replace" in accepted.stdout
    current_pubs = {r[0] for r in expected_rows(two_releases, CURRENT, runs[0]) if r[2] == "pub" and r[10] == CENTRE}
    assert _ids(store, CENTRE, "pub") == current_pubs
    # The command recorded the acceptance in the Dagster instance (DAGSTER_HOME): the UI's check passes again.
    assert _drift_check(instance, CENTRE, "pub") == "SUCCEEDED"
    # ... and the bakeries by materialising their partition with the accept config, as from the UI's launchpad.
    result = dg.materialize(
        [places],
        partition_key=str(places_partition(CENTRE, "bakery")),
        run_config={"ops": {"places": {"config": {"accept": True}}}},
        resources=resources,
        instance=instance,
        selection=[PLACES],
    )
    assert result.success
    (materialised,) = result.asset_materializations_for_node("places")
    assert f"release {CURRENT}'s {bakery.after} held at the drift gate" in materialised.metadata["replaced"].value
    current_bakeries = {
        r[0] for r in expected_rows(two_releases, CURRENT, runs[0]) if r[2] == "bakery" and r[10] == CENTRE
    }
    assert _ids(store, CENTRE, "bakery") == current_bakeries
    (check,) = [e for e in result.get_asset_check_evaluations() if e.check_name == NEW_RELEASE_WITHIN_DRIFT_GATE]
    assert check.passed and check.metadata["places_after"].value == len(current_bakeries)
    assert "accept: true" in check.metadata["accepted"].value
    assert _drift_check(instance, CENTRE, "bakery") == "SUCCEEDED"
    assert {(h.area, h.category) for h in store.held_imports()} == expected_held - {(CENTRE, "pub"), (CENTRE, "bakery")}
    # The next search adds the accepted pubs within the radius.
    assert (_search(instance, resources, campaign) - after_search) & (current_pubs - old[(CENTRE, "pub")])

    # Accepting again, or a pair that is not one, is one clear error, exit 2, and writes nothing.
    table = store.import_rows([CENTRE], ["pub"])
    for args in (["imports", "accept", CENTRE, "pub"], ["imports", "accept", "cell:48.3,2", "pub"]):
        again = subprocess.run([NAKODO, *args], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert again.returncode == 2, again.stdout
        assert len([line for line in again.stderr.splitlines() if line.startswith("Error:")]) == 1, again.stderr
    assert store.import_rows([CENTRE], ["pub"]) == table
