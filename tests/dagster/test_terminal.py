"""What a run prints in the terminal when an import fails: one line, the failure in words and what to do, as a run's
worker prints it (``terminal.FailuresInOneLine``, its loggers' class); the event log keeps the error whole."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from overture_helpers import CURRENT as RELEASE
from test_places_ui_failed import import_from_broken_release

from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.terminal import FailuresInOneLine

LEEDS = Targeting((PointLocation(53.7997, -1.5492, 2),), ("cafe",))


@pytest.fixture
def worker_loggers() -> Iterator[None]:
    """The loggers' class a run's worker sets before Dagster makes its console logger."""
    before = logging.getLoggerClass()
    logging.setLoggerClass(FailuresInOneLine)
    yield
    logging.setLoggerClass(before)


def test_a_failed_import_prints_one_line_that_says_what_failed_and_what_to_do(
    instance, resources, tmp_path, worker_loggers, capfd
):
    _, result = import_from_broken_release(instance, resources, tmp_path, LEEDS)

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
    assert "Stack Trace" not in printed and "is cut short or not a Parquet file" not in printed, printed
    # The UI's event log has the error whole, the reader's own words among its causes.
    (failure,) = result.get_step_failure_events()
    assert "is cut short or not a Parquet file" in failure.step_failure_data.error.to_string()
