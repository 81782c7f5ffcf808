"""A store URL's password shows nowhere: not in what ``nakodo`` prints (its errors included), not in the Dagster
instance its runs are recorded in. The PostgreSQL the tests use trusts loopback, so a URL with any password opens
it: the password below is carried through every command for real."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import dagster as dg
import pytest

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.duck import s3_settings

pytestmark = pytest.mark.postgres

SECRET = "Pa55-w0rd-only-this-test-knows"


def with_password(url: str, password: str) -> str:
    parts = urlsplit(url)
    server = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{parts.username or 'postgres'}:{password}@{server}"))


@pytest.fixture
def database_url(postgres_url: str) -> str:
    """The store under test (the `environment` fixture's), reached with a password in its URL."""
    return with_password(postgres_url, SECRET)


def files_holding(folder: Path, text: str) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() and text.encode() in path.read_bytes()]


@pytest.mark.slow
def test_the_password_shows_in_no_command_output_and_no_run_record(nakodo, release_root, tmp_path, database_url):
    root = {"NAKODO_OVERTURE_ROOT": str(release_root)}
    done = [
        nakodo("campaign", "add", "--name", "Leeds", "--at", "53.8,-1.55", "--radius-km", "10", "--category", "cafe"),
        nakodo("sync", "--wait", "120", **root),
        nakodo("demo", **root),
        nakodo("imports", "status", **root),
    ]
    printed = "\n".join(part for command in done for part in (command.stdout, command.stderr))
    assert SECRET not in printed
    # Still says which store: the user, server and database, the password masked.
    masked = with_password(database_url, "***")
    assert f"Store ready: {masked}" in done[2].stdout

    home = tmp_path / "data" / "dagster_home"
    with dg.DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs()
        assert {run.job_name for run in runs} == {"import_places", "search_campaigns_job"}
        assert all(run.status == dg.DagsterRunStatus.SUCCESS for run in runs)
    # Every byte the runs left: their events, logs, run config and tags, as the UI would show them.
    assert files_holding(home, SECRET) == []


def test_a_store_url_libpq_cannot_read_fails_with_its_password_masked(nakodo, database_url):
    broken = database_url.replace("@", "@[", 1)
    refused = nakodo("campaign", "list", expect=1, NAKODO_DATABASE=broken)
    assert "invalid dsn" in refused.stderr
    assert SECRET not in refused.stdout + refused.stderr
    assert with_password(database_url, "***").replace("@", "@[", 1) in refused.stderr


@pytest.mark.parametrize(
    ("variable", "value", "args"),
    [
        ("NAKODO_DATABASE", f"mysql://nakodo:{SECRET}@db/nakodo", ["campaign", "list"]),
        (
            "NAKODO_NOMINATIM_URL",
            f"ftp://nakodo:{SECRET}@nominatim.example",
            ["campaign", "add", "--name", "Leeds", "--near", "Leeds", "--radius-km", "10", "--category", "cafe"],
        ),
    ],
)
def test_a_url_refused_as_bad_input_is_named_with_its_password_masked(nakodo, variable, value, args):
    refused = nakodo(*args, expect=2, **{variable: value})
    assert SECRET not in refused.stdout + refused.stderr
    assert f"{value.replace(SECRET, '***')!r} is not allowed" in refused.stderr


def test_an_s3_endpoint_refused_is_named_with_its_password_masked():
    with pytest.raises(InvalidInput) as refused:
        s3_settings({"AWS_ENDPOINT_URL": f"ftp://nakodo:{SECRET}@s3.example"})
    assert str(refused.value).startswith("AWS_ENDPOINT_URL 'ftp://nakodo:***@s3.example' is not allowed")
