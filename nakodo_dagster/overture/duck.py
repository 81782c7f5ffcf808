"""The one way this project opens DuckDB on an Overture root: in memory, nothing downloaded, S3 from the environment."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import duckdb
import duckdb_extension_httpfs

from nakodo_dagster.duckdb_connection import in_memory
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.redact import redacted_url

# No machine here reaches the internet: httpfs comes from its PyPI package, at duckdb's exact version.
HTTPFS_EXTENSION = (
    Path(duckdb_extension_httpfs.__file__).parent / "extensions" / f"v{duckdb.__version__}" / "httpfs.duckdb_extension"
)
# Overture's public bucket lives in us-west-2.
DEFAULT_REGION = "us-west-2"
# A remote read rides out a brief outage (500, 503, a dropped connection: waits of 0.25, 0.5, 1 and 2 s) and
# gives up on a request that hangs, so the run fails visibly instead of holding an import slot for good.
HTTP_TIMEOUT_S = 30
HTTP_RETRIES = 4
HTTP_RETRY_WAIT_MS = 250
HTTP_RETRY_BACKOFF = 2


def is_s3(root: str) -> bool:
    """Whether a root is an S3 prefix rather than a local folder."""
    return str(root).startswith("s3://")


@contextmanager
def connect(root: str) -> Iterator[duckdb.DuckDBPyConnection]:
    """An in-memory DuckDB connection for the block (``duckdb_connection.closing``) that can read ``root``: for
    ``s3://`` roots, httpfs and an S3 secret.

    The endpoint is the AWS SDKs' ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (path-style, as MinIO,
    R2 and the loopback test server need); access is anonymous, as for Overture's public bucket, unless
    ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` are set. Read at each call, never at import.
    """
    with in_memory() as connection:
        # A run reads each footer once: the schema check and the query share it.
        connection.execute("SET parquet_metadata_cache = true")
        if is_s3(root):
            # LOAD takes no parameters; the path is this installation's own file, not input.
            connection.execute("LOAD '{}'".format(str(HTTPFS_EXTENSION).replace("'", "''")))
            for setting, value in (
                ("http_timeout", HTTP_TIMEOUT_S),
                ("http_retries", HTTP_RETRIES),
                ("http_retry_wait_ms", HTTP_RETRY_WAIT_MS),
                ("http_retry_backoff", HTTP_RETRY_BACKOFF),
            ):
                # SET takes no parameters; the names and values are this module's constants.
                connection.execute(f"SET {setting} = {value}")
            connection.execute(*s3_secret(os.environ))
        yield connection


def s3_settings(environ: Mapping[str, str]) -> dict[str, object]:
    """S3 access as the environment describes it, the one rule both S3 clients follow (DuckDB's secret here,
    the release index's object store): ``region``; ``endpoint`` (host[:port]) and ``use_ssl`` when
    ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` names one (path-style); ``key_id``, ``secret`` and
    ``session_token`` only when both keys are set, anonymous otherwise."""
    settings: dict[str, object] = {
        "region": environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or DEFAULT_REGION
    }
    endpoint = environ.get("AWS_ENDPOINT_URL_S3") or environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        url = urlsplit(endpoint)
        if url.scheme not in ("http", "https") or not url.netloc or url.path.strip("/") or url.query:
            raise InvalidInput(
                f"AWS_ENDPOINT_URL {redacted_url(endpoint)!r} is not allowed: use http(s)://host[:port], e.g. http://127.0.0.1:9000"
            )
        settings |= {"endpoint": url.netloc, "use_ssl": url.scheme == "https"}
    if environ.get("AWS_ACCESS_KEY_ID") and environ.get("AWS_SECRET_ACCESS_KEY"):
        settings |= {"key_id": environ["AWS_ACCESS_KEY_ID"], "secret": environ["AWS_SECRET_ACCESS_KEY"]}
        if environ.get("AWS_SESSION_TOKEN"):
            settings["session_token"] = environ["AWS_SESSION_TOKEN"]
    return settings


def s3_secret(environ: Mapping[str, str]) -> tuple[str, dict[str, object]]:
    """The CREATE SECRET statement and its parameters for S3 access as the environment describes it."""
    parameters = s3_settings(environ)
    options = ["TYPE s3", "PROVIDER config", "REGION $region"]
    if "endpoint" in parameters:
        options += ["ENDPOINT $endpoint", "URL_STYLE 'path'", "USE_SSL $use_ssl"]
    if "key_id" in parameters:
        options += ["KEY_ID $key_id", "SECRET $secret"]
    if "session_token" in parameters:
        options.append("SESSION_TOKEN $session_token")
    return f"CREATE SECRET overture ({', '.join(options)})", parameters
