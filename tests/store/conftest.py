"""A migrated store on each backend, and worker processes that start their work at the same moment."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nakodo_dagster.store import Store, open_store

WORKER = Path(__file__).with_name("worker.py")


@pytest.fixture
def store(database_url: str) -> Store:
    """A fresh, migrated store: a DuckDB file or a PostgreSQL database."""
    store = open_store(database_url)
    store.migrate()
    return store


class Workers:
    """Processes running worker.py, released together once every one of them is ready."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen] = []

    def start(self, command: str, url: str, args: list[dict]) -> list[subprocess.Popen]:
        """One worker per args, each waiting at the starting line."""
        started = [
            subprocess.Popen(
                [sys.executable, str(WORKER), command, url, json.dumps(a, default=str)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for a in args
        ]
        self.processes += started
        for process in started:
            assert process.stdout.readline().strip() == "ready"
        return started

    def go(self, processes: list[subprocess.Popen]) -> None:
        """Release the workers at once."""
        for process in processes:
            process.stdin.write("\n")
            process.stdin.flush()

    def results(self, processes: list[subprocess.Popen], timeout: float = 60) -> list:
        """Each worker's JSON result, after checking it exited cleanly."""
        outputs = []
        for process in processes:
            out, _ = process.communicate(timeout=timeout)
            assert process.returncode == 0, out
            outputs.append(json.loads(out.strip().splitlines()[-1]))
        return outputs

    def run(self, command: str, url: str, args: list[dict]) -> list:
        """Start the workers, release them together and collect their results."""
        processes = self.start(command, url, args)
        self.go(processes)
        return self.results(processes)


@pytest.fixture
def workers() -> Iterator[Workers]:
    """Worker processes, the ones still alive killed after the test."""
    workers = Workers()
    yield workers
    for process in workers.processes:
        if process.poll() is None:
            process.kill()
        process.communicate()
