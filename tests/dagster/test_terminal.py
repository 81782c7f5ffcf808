"""What a run prints in the terminal when an import fails: one line, the failure in words and what to do, as a run's
worker prints it (``terminal.FailuresInOneLine``, its loggers' class); the event log keeps the error whole."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.headless import register_partitions
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.resources import OvertureResource
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.terminal import FailuresInOneLine

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe",))


@pytest.fixture
def worker_loggers() -> Iterator[None]:
    """The loggers' class a run's worker sets before Dagster makes its console logger."""
    before = logging.getLoggerClass()
    logging.setLoggerClass(FailuresInOneLine)
    yield
    logging.setLoggerClass(before)


def _broken_root(tmp_path: Path) -> str:
    folder = tmp_path / "broken" / RELEASE / "theme=places" / "type=place"
    folder.mkdir(parents=True)
    (folder / "part-00000.zstd.parquet").write_bytes(b"PAR1 this is not a parquet file")
    return str(tmp_path / "broken")


def test_a_failed_import_prints_one_line_that_says_what_failed_and_what_to_do(
    instance, resources, tmp_path, worker_loggers, capfd
):
    resources["store"].store.add_campaign("Leeds", LEEDS)
    ticked = import_sensor(dg.build_sensor_context(instance=instance, resources=resources))
    register_partitions(instance, ticked)
    (request,) = ticked.run_requests
    broken = {**resources, "overture": OvertureResource(root=_broken_root(tmp_path))}

    result = import_places.execute_in_process(
        run_config=request.run_config, tags=request.tags, instance=instance, resources=broken, raise_on_error=False
    )

    assert not result.success
    printed = capfd.readouterr().err
    errors = [line for line in printed.splitlines() if " - ERROR - " in line]
    step_failure, run_failure = errors
    assert " - STEP_FAILURE - " in step_failure and " - RUN_FAILURE - " in run_failure
    assert step_failure.endswith(
        f'Execution of step "import_block" failed: Overture release {RELEASE}: file part-00000.zstd.parquet is '
        f"unreadable (truncated or not Parquet). Replace file part-00000.zstd.parquet with a whole copy, check the "
        f"release with `nakodo overture check {RELEASE}` (it names every unreadable file), then retry: `nakodo "
        "imports retry cell:53.5,-2 cafe`. 1 pair of this import is marked failed; no campaign waits for them, and "
        "the import sensor asks for them again on its own after 7 days."
    ), step_failure
    assert run_failure.endswith("Steps failed: ['import_block']. The step's failure is above."), run_failure
    assert "Stack Trace" not in printed and "is not a Parquet file" not in printed, printed
    # The UI's event log has the error whole, the reader's own words among its causes.
    (failure,) = result.get_step_failure_events()
    assert "is not a Parquet file" in failure.step_failure_data.error.to_string()
