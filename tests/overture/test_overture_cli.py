"""``nakodo sample-release``: writes a release and prints its folder last; bad input exits 2 saying why."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from nakodo_dagster.cli.samples import sample_release
from nakodo_dagster.overture.releases import newest_release
from nakodo_dagster.overture.sample import ReleaseDrift, write_sample_release


def test_sample_release_writes_a_release_and_prints_its_folder_last(tmp_path):
    arguments = [str(tmp_path), "--release", "2026-10-15.0", "--rows", "300", "--files", "2", "--row-group-rows", "50"]
    result = CliRunner().invoke(sample_release, [*arguments, "--schema", "previous", "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == str(tmp_path / "2026-10-15.0")
    assert newest_release(tmp_path) == "2026-10-15.0"
    assert len(list((tmp_path / "2026-10-15.0" / "theme=places" / "type=place").iterdir())) == 2


def test_sample_release_writes_a_next_release_with_drift(tmp_path):
    arguments = [str(tmp_path), "--rows", "300", "--files", "2", "--row-group-rows", "50", "--seed", "3"]
    assert CliRunner().invoke(sample_release, [*arguments, "--release", "2026-10-15.0"]).exit_code == 0
    result = CliRunner().invoke(sample_release, [*arguments, "--release", "2026-11-18.0", "--drop", "cafe"])
    assert result.exit_code == 0, result.output
    assert newest_release(tmp_path) == "2026-11-18.0"


def test_sample_release_writes_a_release_months_on_as_the_api_chains_it(tmp_path):
    arguments = ["--rows", "300", "--files", "1", "--row-group-rows", "50", "--seed", "3", "--reissued", "0.1"]
    result = CliRunner().invoke(
        sample_release, [str(tmp_path / "cli"), "--release", "2026-12-17.0", "--months", "2", *arguments]
    )
    assert result.exit_code == 0, result.output
    drift = ReleaseDrift(reissued=0.1)
    write_sample_release(tmp_path / "api", "2026-12-17.0", 300, 1, 50, seed=3, drift=[drift, drift], progress=False)
    written = {path: pq.read_table(path) for path in (tmp_path / "cli").rglob("*.parquet")}
    by_api = {path: pq.read_table(tmp_path / "api" / path.relative_to(tmp_path / "cli")) for path in written}
    assert written and all(written[path].equals(by_api[path]) for path in written)
    once = tmp_path / "once"
    write_sample_release(once, "2026-12-17.0", 300, 1, 50, seed=3, drift=drift, progress=False)
    assert not all(pq.read_table(once / path.relative_to(tmp_path / "cli")).equals(written[path]) for path in written)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--rows", "3"], "rows 3 is not allowed"),
        (["--files", "0"], "files 0 is not allowed"),
        (["--rows", "100", "--files", "101"], "every file needs at least one place"),
        (["--release", "../x"], "YYYY-MM-DD.N"),
        (["--schema", "old"], "'old' is not one of"),
        (["--rows", "many"], "'many' is not a valid integer"),
        (["--inflate", "croissant"], "not in the sample's taxonomy"),
        (["--months", "0"], "0 is not in the range x>=1"),
    ],
)
def test_bad_input_exits_2_saying_what_is_allowed(tmp_path, arguments, message):
    result = CliRunner().invoke(sample_release, [str(tmp_path), *arguments])
    assert result.exit_code == 2
    assert message in result.stderr
