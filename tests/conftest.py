"""Fixtures every layer shares: a throwaway PostgreSQL database and both store URLs."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg2
import pytest

PG_ADMIN_URL = os.environ.get("NAKODO_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


def _admin_connection():
    connection = psycopg2.connect(PG_ADMIN_URL)
    connection.autocommit = True
    return connection


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database of its own, dropped afterwards."""
    name = f"nakodo_test_{uuid.uuid4().hex[:12]}"
    admin = _admin_connection()
    try:
        with admin.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
        yield f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
        with admin.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


@pytest.fixture
def duckdb_url(tmp_path) -> str:
    """A DuckDB store file path in a temporary folder."""
    return str(tmp_path / "store.duckdb")


@pytest.fixture(params=["duckdb", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request) -> str:
    """The same test against both store backends: a DuckDB file and a PostgreSQL database."""
    return request.getfixturevalue(f"{request.param}_url")
