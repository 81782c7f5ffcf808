"""``nakodo`` as a user runs it: a real process, a local Nominatim on loopback, a sample release, both stores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest
from click.testing import CliRunner, Result
from overture_helpers import CURRENT as RELEASE

from nakodo_dagster.cli import main
from nakodo_dagster.overture.sample import write_sample_release
from nakodo_dagster.store import open_store

# The console script installed beside the interpreter, exactly what a user types.
NAKODO = str(Path(sys.executable).with_name("nakodo"))
# The tables a user's command writes rows into.
USER_TABLES = ("campaigns", "campaign_businesses", "place_imports", "places", "place_names")


def place(name: str, lat: float, lng: float, importance: float) -> dict:
    """One Nominatim /search result as format=json gives it (coordinates as strings, as Nominatim sends them)."""
    return {
        "place_id": abs(hash(name)) % 10**8,
        "osm_type": "relation",
        "lat": f"{lat}",
        "lon": f"{lng}",
        "class": "boundary",
        "type": "administrative",
        "importance": importance,
        "display_name": name,
        "boundingbox": [f"{lat - 0.1}", f"{lat + 0.1}", f"{lng - 0.1}", f"{lng + 0.1}"],
    }


# What the local Nominatim knows, keyed by the query as Nominatim receives it.
ANSWERS = {
    "leeds": [
        place("Leeds, West Yorkshire, England, United Kingdom", 53.7997, -1.5492, 0.71),
        # The same city as a node a kilometre away: not a rival.
        place("Leeds, City of Leeds, West Yorkshire, England, United Kingdom", 53.7965, -1.5478, 0.66),
        place("Leeds, Jefferson County, Alabama, United States", 33.5482, -86.5444, 0.45),
    ],
    "springfield": [
        place("Springfield, Sangamon County, Illinois, United States", 39.7990, -89.6440, 0.62),
        place("Springfield, Hampden County, Massachusetts, United States", 42.1015, -72.5898, 0.59),
        place("Springfield, Greene County, Missouri, United States", 37.2090, -93.2923, 0.57),
    ],
    "atlantis": [],
}


class LocalNominatim:
    """Answers Nominatim's /search with ANSWERS and remembers every request (query and user agent)."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                params = {key: values[0] for key, values in parse_qs(parts.query).items()}
                owner.requests.append({"path": parts.path, "user_agent": self.headers["User-Agent"], **params})
                body = json.dumps(ANSWERS.get(params.get("q", ""), [])).encode()
                self.send_response(200 if parts.path == "/search" else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        # A short poll: shutting the server down waits for it, once per test.
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.01,), daemon=True)

    def queries(self) -> list[str]:
        """The place names asked for, in order."""
        return [request["q"] for request in self.requests]


@pytest.fixture
def nominatim() -> Iterator[LocalNominatim]:
    """A Nominatim on loopback: no test reaches the internet."""
    local = LocalNominatim()
    local.thread.start()
    try:
        yield local
    finally:
        local.server.shutdown()
        local.server.server_close()


@pytest.fixture(scope="session")
def release_root(tmp_path_factory) -> Path:
    """A small sample release (20,000 places in 4 files) in Overture's layout."""
    root = tmp_path_factory.mktemp("overture")
    write_sample_release(root, release=RELEASE, rows=20_000, files=4, row_group_rows=500, seed=7, progress=False)
    return root


@pytest.fixture
def environment(database_url: str, nominatim: LocalNominatim, monkeypatch) -> dict[str, str]:
    """The variables a user would set: the store under test, the local Nominatim, imports off, no proxy.

    Also applied to this process (for in-process invocations); subprocesses get the returned copy.
    """
    for name in ("NAKODO_OVERTURE_ROOT", "NAKODO_OVERTURE_RELEASE", "DAGSTER_HOME", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    settings = {
        "NAKODO_DATABASE": database_url,
        "NAKODO_NOMINATIM_URL": nominatim.url,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    for name, value in settings.items():
        monkeypatch.setenv(name, value)
    return dict(os.environ)


@pytest.fixture
def nakodo(environment: dict[str, str], tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``nakodo(*args, expect=0, **variables)``: run the console script in a working folder of its own."""

    def run(*args: str, expect: int = 0, **variables: str) -> subprocess.CompletedProcess:
        done = subprocess.run(
            [NAKODO, *args],
            cwd=tmp_path,
            env={**environment, **variables},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == expect, f"nakodo {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done

    return run


@pytest.fixture
def nakodo_here(environment: dict[str, str], tmp_path: Path, monkeypatch) -> Callable[..., Result]:
    """``nakodo_here(*args, expect=0, **variables)``: the same command in this process with click's runner, a second
    faster than a process each. For input refused in many ways: what a process adds (the console script, its exit
    status) is shown by each command's tests with ``nakodo``."""
    monkeypatch.chdir(tmp_path)

    def run(*args: str, expect: int = 0, **variables: str) -> Result:
        result = CliRunner().invoke(main, list(args), prog_name="nakodo", env=variables)
        assert result.exit_code == expect, (
            f"nakodo {' '.join(args)}: {result.exit_code}\n{result.output}\n{result.exception!r}"
        )
        return result

    return run


@pytest.fixture
def written(database_url: str) -> Callable[[], dict[str, int]]:
    """``written()``: the rows in each user table that has any; empty if the store was never even created."""

    def count() -> dict[str, int]:
        if not database_url.startswith("postgresql://") and not Path(database_url).exists():
            return {}
        store = open_store(database_url)
        store.migrate()
        counts = store._transact(lambda tx: [tx.rows(f"SELECT count(*) FROM {table}")[0][0] for table in USER_TABLES])
        return {table: n for table, n in zip(USER_TABLES, counts, strict=True) if n}

    return count
