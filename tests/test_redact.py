"""redacted_url: a password never survives, and the rest of what names the server does."""

from __future__ import annotations

from urllib.parse import quote, urlsplit

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nakodo_dagster.redact import redacted_url


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("postgresql://nakodo:s3cret@db.example:5432/nakodo", "postgresql://nakodo:***@db.example:5432/nakodo"),
        # Percent-encoded, and an `@` left unencoded in the password.
        ("postgresql://nakodo:p%40ss@db/nakodo", "postgresql://nakodo:***@db/nakodo"),
        ("postgresql://nakodo:p@s/s?@db/nakodo?sslmode=require", "postgresql://nakodo:***@db/nakodo?sslmode=require"),
        # libpq's password parameter, in a URL's query and in a key/value connection string.
        (
            "postgresql://db/nakodo?user=nakodo&password=s3cret&sslmode=require",
            "postgresql://db/nakodo?user=nakodo&password=***&sslmode=require",
        ),
        ("host=db user=nakodo password='s3 cret' dbname=nakodo", "host=db user=nakodo password=*** dbname=nakodo"),
        # A URL quoted inside a message, as libpq and the project's errors quote one.
        (
            'invalid dsn: missing "]" in URI: "postgresql://nakodo:s3cret@[::1/nakodo"',
            'invalid dsn: missing "]" in URI: "postgresql://nakodo:***@[::1/nakodo"',
        ),
        ("store 'mysql://root:s3cret@db/nakodo' is not allowed", "store 'mysql://root:***@db/nakodo' is not allowed"),
    ],
)
def test_the_password_is_masked_and_the_server_still_named(text, shown):
    assert redacted_url(text) == shown


@pytest.mark.parametrize(
    "text",
    [
        "/var/lib/nakodo/nakodo.duckdb",
        "postgresql://nakodo@db:5432/nakodo",
        "s3://overturemaps-us-west-2/release",
        "http://127.0.0.1:3000/runs/b4c2",
        "Store ready: data/nakodo.duckdb",
    ],
)
def test_text_without_a_password_is_unchanged(text):
    assert redacted_url(text) == text


# Any password a user might choose, written as a URL carries it (percent-encoded) and as it was typed.
_PASSWORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zs", "Zl", "Zp")), min_size=1)


@given(password=_PASSWORDS, user=st.from_regex(r"[a-z][a-z0-9_]{0,15}", fullmatch=True))
def test_no_password_survives_and_the_url_still_parses_to_the_same_server(password, user):
    secret = f"pw-{password}"
    # As typed: all but a quote, which ends a URL where a message quotes one.
    for written in (quote(secret, safe=""), secret.replace("'", "").replace('"', "")):
        url = f"postgresql://{user}:{written}@db.internal:5432/nakodo?sslmode=require"
        shown = redacted_url(url)
        assert written not in shown
        parts = urlsplit(shown)
        assert (parts.username, parts.password, parts.hostname, parts.port, parts.path, parts.query) == (
            user,
            "***",
            "db.internal",
            5432,
            "/nakodo",
            "sslmode=require",
        )
