"""The remote release misbehaves: errors that pass, bursts of throttling, resets and stalls that outlast the read's
own tries, a server that hangs, broken files, a release that goes away.

The S3 server is real (moto on loopback) and so is the fault: a proxy in front of it answers 500 / 503, resets
connections, stalls or lets the server change under the client. A burst the step's retry outlasts lands under the
run's marks; a failed re-import keeps the previous places and its mark, which reads as failed at once (7-day
block); Dagster shows the run failed.
"""

from __future__ import annotations

import os
import re
import struct
import time
from pathlib import Path

import dagster as dg
import pytest
from fault_helpers import (
    assert_run_failed,
    changed_places,
    execute,
    failure_text,
    marks,
    request_pairs,
    states,
    stored_places,
    tick,
)
from overture_helpers import CURRENT as RELEASE

from bench.fault_proxy import BURSTS, Rule, burst
from bench.independent import expected_rows
from nakodo_dagster import jobs, tags
from nakodo_dagster.jobs import STEP_RETRY_SECONDS
from nakodo_dagster.jobs.import_places import import_payload
from nakodo_dagster.overture import duck
from nakodo_dagster.placement import ImportRun, PointLocation, Targeting
from nakodo_dagster.resources import OvertureResource, StoreResource

pytestmark = pytest.mark.faults

# 2 km around Leeds: one cell, two categories, one run.
LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe", "pub"))


@pytest.fixture
def resources(remote_release, duckdb_url) -> dict:
    return {"store": StoreResource(database=duckdb_url), "overture": OvertureResource(root=remote_release.root)}


def test_errors_that_pass_are_retried_and_the_import_succeeds(instance, resources, remote_release, release_root):
    store = resources["store"].store
    store.add_campaign("Leeds", LEEDS)
    proxy = remote_release.proxy
    # Listings go through DuckDB's httpfs, object reads through the release index's HTTP client: both retry.
    for rule in (Rule("listing", 2, status=503), Rule("listing", 1, status=500), Rule("object", 2, status=503)):
        proxy.add(rule)

    [request] = tick(instance, resources).run_requests
    result = execute(instance, resources, request)

    assert result.success, failure_text(result)
    assert proxy.faults() == 5
    run = ImportRun.from_payload(import_payload(request.run_config))
    expected = expected_rows(Path(release_root), RELEASE, run)
    held = stored_places(store, request_pairs(request))
    assert {place_id for pair in held.values() for place_id, _ in pair} == {row[0] for row in expected}
    assert marks(store, LEEDS) == []


# Longer than the read's own tries ride out (shortened below), shorter than the step's pause.
BURST_SECONDS = 8


@pytest.mark.parametrize("kind", list(BURSTS))
def test_a_burst_past_the_reads_tries_is_tried_again_in_the_run_and_lands(
    instance, resources, remote_release, release_root, monkeypatch, kind
):
    store = resources["store"].store
    campaign = store.add_campaign("Leeds", LEEDS)
    [request] = tick(instance, resources).run_requests
    # A stall costs the read its timeout per request: short ones, and fewer, keep the test short.
    monkeypatch.setattr(duck, "HTTP_TIMEOUT_S", 1)
    monkeypatch.setattr(duck, "HTTP_RETRIES", 1)
    remote_release.proxy.add(burst(kind, BURST_SECONDS))
    started = time.monotonic()

    result = execute(instance, resources, request)

    assert result.success, failure_text(result)
    assert time.monotonic() - started >= STEP_RETRY_SECONDS, "the step ran again after its pause"
    assert remote_release.proxy.faults() > 0
    run = ImportRun.from_payload(import_payload(request.run_config))
    held = stored_places(store, request_pairs(request))
    expected = expected_rows(Path(release_root), RELEASE, run)
    assert {place_id for pair in held.values() for place_id, _ in pair} == {row[0] for row in expected}
    assert marks(store, LEEDS) == [], "landed under the run's marks"
    assert states(store, campaign) == (0, {"loaded"}), "nothing read as failed"
    assert "The Overture release could not be read" in "".join(
        record.event_log_entry.user_message for record in instance.get_records_for_run(result.run_id).records
    )


def _replace_objects(remote, change) -> None:
    """Rewrite every object of the release on the server (its ETag changes, as a rewritten file's would)."""
    listed = remote.client.list_objects_v2(Bucket=remote.bucket, Prefix=f"release/{RELEASE}/")
    for item in listed["Contents"]:
        body = remote.client.get_object(Bucket=remote.bucket, Key=item["Key"])["Body"].read()
        remote.client.put_object(Bucket=remote.bucket, Key=item["Key"], Body=change(body))


def _scrambled(body: bytes) -> bytes:
    """The same length, the magic and the footer intact, every data page replaced by noise."""
    (footer,) = struct.unpack("<I", body[-8:-4])
    return body[:4] + os.urandom(len(body) - footer - 12) + body[-footer - 8 :]


def _delete_release(remote) -> None:
    listed = remote.client.list_objects_v2(Bucket=remote.bucket, Prefix=f"release/{RELEASE}/")
    for item in listed["Contents"]:
        remote.client.delete_object(Bucket=remote.bucket, Key=item["Key"])


def _hang(remote, monkeypatch) -> None:
    # A short timeout and one retry of the step keep the test short; the production values are duck's and jobs'.
    monkeypatch.setattr(duck, "HTTP_TIMEOUT_S", 1)
    monkeypatch.setattr(duck, "HTTP_RETRIES", 1)
    monkeypatch.setattr(jobs, "STEP_RETRIES", 1)
    monkeypatch.setattr(jobs, "STEP_RETRY_SECONDS", 1)
    remote.proxy.add(Rule("listing", 20, stall_s=3))


def _truncate(remote, monkeypatch) -> None:
    # The first import read the files whole (and indexed them): cut short since, before this import began, they are
    # unreadable from its first read, whatever the index says: the pairs are marked failed without another try (a
    # try allowed here would come at once).
    monkeypatch.setattr(jobs, "STEP_RETRY_SECONDS", 1)
    _replace_objects(remote, lambda body: body[: len(body) // 2])


# Each fault: how it is made, what the failure says, and how many times the step runs.
FAULTS = {
    "server hangs past the timeout and the step's retry": (_hang, r"Timeout was reached", 2),
    "truncated files": (_truncate, r"file [\w.-]+\.parquet is unreadable \(truncated or not Parquet\)", 1),
    "corrupt files": (
        lambda remote, _: _replace_objects(remote, _scrambled),
        r"(?i)corrupt|invalid|deserializ|zstd",
        1,
    ),
    "release gone between discovery and read": (
        lambda remote, _: remote.proxy.add(Rule("listing", 1, after=lambda: _delete_release(remote))),
        rf"release '{re.escape(RELEASE)}' is not under .*available here: none",
        # Its files vanish under the read, which the step tries again; the next try finds no release at all.
        2,
    ),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_failed_reimport_keeps_the_places_and_blocks_for_a_week(
    instance, resources, remote_release, monkeypatch, fault
):
    store = resources["store"].store
    campaign = store.add_campaign("Leeds", LEEDS)
    [request] = tick(instance, resources).run_requests
    assert execute(instance, resources, request).success
    pairs = request_pairs(request)
    before = stored_places(store, pairs)
    assert any(before.values())
    # The same run asked for again (its pairs re-marked with its own stamp), as a month later.
    store.force_request(pairs, tags.stamp_from_tag(request.tags[tags.STAMP]))
    inject, message, tries = FAULTS[fault]
    inject(remote_release, monkeypatch)

    result = execute(instance, resources, request)

    assert_run_failed(instance, result)
    assert re.search(message, failure_text(result)), failure_text(result)
    started = instance.get_records_for_run(
        result.run_id, of_type={dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_RESTARTED}
    ).records
    assert len(started) == tries, "only the object store's fault is tried again, not the data's own"
    assert not changed_places(before, stored_places(store, pairs)), "the previous places stay"
    assert [(area, category) for area, category, _ in marks(store, LEEDS)] == sorted(pairs), "the mark stays"
    assert states(store, campaign) == (0, {"failed"}), "nobody waits on it: it reads as failed"
    assert not tick(instance, resources).run_requests, "and it is not asked for again for a week"
