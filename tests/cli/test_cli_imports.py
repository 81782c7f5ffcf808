"""A failed import seen from the command line: sync exits 1, the freshness table shows it, retry lifts the block
and the next sync imports it."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from shlex import split

import dagster as dg
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.partitions import PLACES_PARTITIONS, places_partition
from nakodo_dagster.placement import RETRY_DAYS, PointLocation, Targeting, areas_for
from nakodo_dagster.store import open_store

# A 2 km circle in the middle of a cell: one area, one pair, one run.
CAFES = Targeting((PointLocation(53.75, -1.75, 2),), ("cafe",))


def broken_release(tmp_path: Path) -> Path:
    """A release whose only Parquet file is not Parquet at all: every read of it fails."""
    folder = tmp_path / "broken" / RELEASE / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    (folder / "part-00000.zstd.parquet").write_bytes(b"PAR1 this is not a parquet file")
    return tmp_path / "broken"


def test_a_failed_import_exits_1_shows_as_failed_and_retry_lifts_the_block(
    nakodo, tmp_path, database_url, release_root
):
    (area,) = areas_for(CAFES)
    added = nakodo(*split("campaign add --name Leeds --at 53.75,-1.75 --radius-km 2 --category cafe"))
    campaign_id = added.stdout.splitlines()[-1]

    broken = str(broken_release(tmp_path))
    started = datetime.now(UTC)
    home = tmp_path / "dagster_home"
    home.mkdir()
    failed = nakodo(
        "sync", "--campaign", campaign_id, "--wait", "60", NAKODO_OVERTURE_ROOT=broken, DAGSTER_HOME=str(home), expect=1
    )
    assert "1 import run (1 failed)" in failed.stdout
    # As under the daemon, the UI shows the failed run's pair as a failed partition of places.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        keys = PLACES_PARTITIONS.get_partition_keys(dynamic_partitions_store=instance)
        status = instance.get_status_by_partition(PLACES, keys, PLACES_PARTITIONS) or {}
        failed_partitions = {key for key, state in status.items() if state == dg.AssetPartitionStatus.FAILED}
    assert failed_partitions == {str(places_partition(area, "cafe"))}
    assert "`nakodo imports retry AREA CATEGORY` overrides the block" in failed.stderr
    status = nakodo("imports", "status").stdout.splitlines()
    assert status[1].split()[:6] == ["cafe", "0", "0", "1", "0", "-"]
    # The failed area, with why it failed and when it is asked for again: a week after the failure itself.
    assert "Failed imports campaigns need (1 pair):" in status
    [listed] = [line for line in status if line.startswith("cafe ") and "nakodo imports retry" in line]
    found = re.fullmatch(
        rf"cafe +{re.escape(area)} +(\S+ \S+) UTC +\[1\] +(\S+ \S+) UTC +nakodo imports retry {re.escape(area)} cafe",
        listed,
    )
    assert found, listed
    failed_at, again = found.groups()
    [why] = [line for line in status if line.startswith("[1] ")]
    assert why.startswith(f"[1] Overture release {RELEASE}: ") and "part-00000.zstd.parquet" in why
    failed_at = datetime.strptime(failed_at, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)
    assert started - timedelta(minutes=1) <= failed_at <= datetime.now(UTC)
    assert datetime.strptime(again, "%Y-%m-%d %H:%M").replace(tzinfo=UTC) == failed_at + timedelta(days=RETRY_DAYS)

    retried = nakodo("imports", "retry", area, "cafe")
    assert f"Forgot the failed import of cafe in {area}" in retried.stdout
    assert open_store(database_url).import_rows([area], ["cafe"]) == []

    # The release is mended: the failed run in Dagster's history does not block the retried work.
    mended = nakodo("sync", "--campaign", campaign_id, "--wait", "60", NAKODO_OVERTURE_ROOT=str(release_root))
    assert "1 import run (0 failed)" in mended.stdout
    [row] = open_store(database_url).import_rows([area], ["cafe"])
    assert row.release == RELEASE


def test_imports_status_says_where_in_line_each_campaign_waits_for_its_first_businesses(nakodo, database_url):
    nakodo(*split("campaign add --name Leeds --at 53.75,-1.75 --radius-km 2 --category cafe"))
    nakodo(*split("campaign add --name Tokyo --at 35.75,139.75 --radius-km 2 --category bakery"))
    nakodo(*split("campaign add --name Madrid --at 40.25,-3.75 --radius-km 2 --category pub"))
    store = open_store(database_url)
    # The sensor's tick admits one run; the other two first blocks wait in the line, oldest campaign first.
    [admitted] = store.reserve_missing(datetime.now(UTC), max_runs=1).runs
    assert admitted.pairs == (("cell:53.5,-2", "cafe"),)

    shown = nakodo("imports", "status").stdout.splitlines()

    assert shown[shown.index("") + 1].startswith("Import line: 2 blocks wait for the queue. Accounts take turns")
    table = [re.split(r"\s{2,}", line) for line in shown[-4:]]
    assert table == [
        ["campaign", "name", "account", "first businesses", "blocks in line"],
        ["1", "Leeds", "default", "first block queued or running", "0"],
        ["2", "Tokyo", "default", "first block 1 of 2 in line", "1"],
        ["3", "Madrid", "default", "first block 2 of 2 in line", "1"],
    ]
    one = nakodo("imports", "status", "--campaign", "3").stdout.splitlines()
    assert one[-1].startswith("3 ") and "first block 2 of 2 in line" in one[-1]
