"""The remote path: the same releases on an S3-compatible server on loopback, read through DuckDB's httpfs."""

from __future__ import annotations

import duckdb
import pytest
from overture_helpers import BUCKET, CURRENT, PREVIOUS, block_run, fiji_run

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.duck import connect, s3_secret
from nakodo_dagster.overture.reader import read_places
from nakodo_dagster.overture.releases import list_releases, newest_release, resolve_release


@pytest.mark.parametrize("release", [CURRENT, PREVIOUS])
@pytest.mark.parametrize("run", [block_run(52.0, -2.0), fiji_run()], ids=["block", "antimeridian country"])
def test_reading_s3_gives_the_same_rows_as_reading_the_folder(index_dir, sample_root, s3_root, expected, release, run):
    remote = read_places(run, s3_root, release, index_dir=index_dir)
    local = read_places(run, str(sample_root), release, index_dir=index_dir)
    assert remote.table.equals(local.table)
    assert remote.table.to_pylist() and [tuple(r.values()) for r in remote.table.to_pylist()] == expected(release, run)
    assert remote.stats.files == 4
    assert remote.stats.requests > 4
    assert remote.stats.bytes_read > 0


def test_releases_are_discovered_on_s3(s3_root):
    assert list_releases(s3_root) == [PREVIOUS, CURRENT]
    assert newest_release(s3_root) == CURRENT
    assert resolve_release(s3_root, PREVIOUS) == PREVIOUS
    with pytest.raises(InvalidInput, match=r"only the last two releases online.*2026-10-15\.0, 2026-11-18\.0"):
        resolve_release(s3_root, "2026-01-01.0")


def test_a_prefix_without_releases_and_a_missing_bucket_are_invalid_input(s3_root):
    with pytest.raises(InvalidInput, match="holds no release"):
        newest_release(f"s3://{BUCKET}/elsewhere")
    with pytest.raises(InvalidInput, match="not an S3 bucket"):
        newest_release("s3://no-such-bucket/release")


def test_credentials_when_set_are_used(s3_root, monkeypatch):
    # moto accepts any signature: this checks that signed requests reach it, not that keys are checked.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "reader")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "reader-secret")
    with connect(s3_root) as connection:
        secret = connection.execute("SELECT secret_string FROM duckdb_secrets()").fetchone()[0]
    assert "key_id=reader" in secret
    assert newest_release(s3_root) == CURRENT


def test_the_endpoint_is_read_when_connecting_not_at_import(s3_root, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
    with pytest.raises(duckdb.Error, match=r"127\.0\.0\.1:1"):
        newest_release(s3_root)


def test_s3_secret_follows_the_aws_environment():
    sql, parameters = s3_secret({})
    assert "ENDPOINT" not in sql and "KEY_ID" not in sql
    assert parameters == {"region": "us-west-2"}
    sql, parameters = s3_secret(
        {
            "AWS_ENDPOINT_URL": "http://ignored:1",
            "AWS_ENDPOINT_URL_S3": "https://r2.example.com",
            "AWS_REGION": "auto",
            "AWS_ACCESS_KEY_ID": "key",
            "AWS_SECRET_ACCESS_KEY": "secret",
            "AWS_SESSION_TOKEN": "token",
        }
    )
    assert "URL_STYLE 'path'" in sql and "SESSION_TOKEN $session_token" in sql
    assert parameters == {
        "region": "auto",
        "endpoint": "r2.example.com",
        "use_ssl": True,
        "key_id": "key",
        "secret": "secret",
        "session_token": "token",
    }


@pytest.mark.parametrize("endpoint", ["127.0.0.1:9000", "ftp://host", "http://host/path", "http://"])
def test_a_malformed_endpoint_is_invalid_input(endpoint):
    with pytest.raises(InvalidInput, match="AWS_ENDPOINT_URL"):
        s3_secret({"AWS_ENDPOINT_URL": endpoint})
