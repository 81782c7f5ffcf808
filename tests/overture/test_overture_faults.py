"""A read's fault in words: a transient one is tried again with a doubling pause, a permanent one fails at once."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from nakodo_dagster.overture.faults import READ_ATTEMPTS, ReadFailed, classify, read_with_retries


def _flaky(failures: list[BaseException]):
    """A read that raises each of ``failures`` in turn, then returns "read"."""

    def read() -> str:
        if failures:
            raise failures.pop(0)
        return "read"

    return read


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        TimeoutError("timed out"),
        OSError("Generic S3 error: 503 Service Unavailable"),
        OSError("Generic S3 error: SlowDown: Please reduce your request rate"),
        # DuckDB's words for a connection reset mid-request, as the fault proxy's reset draws them.
        OSError("IO Error: Failure when receiving data from the peer error for HTTP GET to 'http://127.0.0.1:9/b/'"),
    ],
)
def test_a_transient_fault_is_tried_again_with_a_doubling_pause(error):
    pauses: list[float] = []
    assert read_with_retries(_flaky([error, error]), sleep=pauses.append) == "read"
    assert pauses == [1.0, 2.0]


def test_a_transient_fault_that_lasts_fails_after_the_tries_naming_them():
    pauses: list[float] = []
    with pytest.raises(ReadFailed) as failed:
        read_with_retries(_flaky([TimeoutError("timed out")] * READ_ATTEMPTS), sleep=pauses.append)
    assert failed.value.fault.kind == "transient"
    assert len(pauses) == READ_ATTEMPTS - 1
    assert f"after {READ_ATTEMPTS} tries" in str(failed.value)


def test_a_truncated_parquet_file_fails_at_once_naming_the_file(tmp_path: Path, release_root: str):
    source = next(Path(release_root).rglob("*.parquet"))
    truncated = tmp_path / "part-00003.parquet"
    truncated.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    pauses: list[float] = []

    with pytest.raises(ReadFailed) as failed:
        read_with_retries(lambda: pq.read_table(truncated), sleep=pauses.append)

    assert pauses == []
    assert failed.value.fault.kind == "unreadable"
    assert str(failed.value) == "file part-00003.parquet is unreadable (truncated or not Parquet)"


def test_an_unknown_fault_is_not_tried_again():
    fault = classify(ValueError("something else"))
    assert fault.kind == "other"
