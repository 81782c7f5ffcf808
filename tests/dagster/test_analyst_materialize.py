"""An analyst re-materialises one failed partition with `dagster asset materialize`, as from a shell."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
from overture_helpers import CURRENT as RELEASE
from store_helpers import count_places

from bench.independent import expected_rows
from nakodo_dagster import tags
from nakodo_dagster.placement import import_runs, parse_area_key
from nakodo_dagster.store import open_store

AREA, CATEGORY = "cell:53.5,-2", "cafe"


def test_materialising_a_failed_pair_by_hand_overrides_its_block(tmp_path, duckdb_url, release_root, monkeypatch):
    store = open_store(duckdb_url)
    store.migrate()
    # A failed import a day ago: automatic retries are blocked for a week.
    store.force_request([(AREA, CATEGORY)], datetime.now(UTC) - timedelta(days=1))
    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as instance:
        # The import sensor registered the pair's partitions when it launched the import that failed.
        instance.add_dynamic_partitions("area", [AREA])
        instance.add_dynamic_partitions("category", [CATEGORY])
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "NAKODO_DATABASE": duckdb_url,
        "NAKODO_OVERTURE_ROOT": release_root,
        "NAKODO_OVERTURE_RELEASE": "",
    }
    dagster = Path(sys.executable).with_name("dagster")

    done = subprocess.run(
        [
            str(dagster),
            "asset",
            "materialize",
            "--select",
            "places",
            "--partition",
            f"{AREA}|{CATEGORY}",
            "-m",
            "nakodo_dagster.definitions",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    [row] = store.import_rows([AREA], [CATEGORY])
    (run,) = import_runs({AREA: [CATEGORY]}, {AREA: parse_area_key(AREA)})
    expected = expected_rows(Path(release_root), RELEASE, run)
    assert (row.release, row.rows) == (RELEASE, len(expected))
    assert count_places(store, [(AREA, CATEGORY)]) == {(AREA, CATEGORY): len(expected)}
    with dg.DagsterInstance.get() as instance:
        assert instance.get_materialized_partitions(dg.AssetKey("places")) == {f"{AREA}|{CATEGORY}"}
        (run,) = instance.get_runs()
        materialisation = instance.get_latest_materialization_event(dg.AssetKey("places")).asset_materialization
    # The run says what it re-imported and over what, in its log and on the partition.
    assert f"Re-importing {CATEGORY} in {AREA} from release {RELEASE} by hand; the pair had an import asked for" in (
        done.stderr
    )
    assert materialisation.metadata["replaced"].value.startswith("an import asked for at ")
    assert "not loaded" in materialisation.metadata["replaced"].value
    # Its stamp is on the run: the sensors find its mark by it if it is killed or cancelled.
    assert tags.STAMP in run.tags
