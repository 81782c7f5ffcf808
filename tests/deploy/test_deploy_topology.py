"""The production topology on this machine: a code server (the image's own command), the webserver and the daemon
as three processes, Dagster's storage and the project's store in PostgreSQL, the instance read from
deploy/production/dagster.yaml. One campaign, added with the CLI, is imported two runs at a time, searched, and read
back with the CLI; the UI answers over GraphQL throughout, and a run of places launched from it by hand is queued as
an import.

Kubernetes is not here, so the one change to the production instance is its run launcher: Dagster's default one,
which asks the code server to start each run as a process of its own (in production, K8sRunLauncher asks the
cluster for a Job per run; tests/deploy/test_deploy_instance.py and test_deploy_helm_values.py check those Jobs).
As in production, only the code server (and so the runs it starts) is given the NAKODO_* variables; the webserver
and the daemon know Dagster's storage alone, and import the project's code only for the instance's run queue
(nakodo_dagster/coordinator.py), which runs in whichever of them submits a run.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg2
import pytest
import yaml
from deploy_helpers import instructions, production_instance

from nakodo_dagster import tags
from nakodo_dagster.partitions import places_partition
from nakodo_dagster.placement import PointLocation, Targeting, areas_for, import_runs
from nakodo_dagster.store import open_store

pytestmark = [pytest.mark.long, pytest.mark.slow, pytest.mark.postgres]

BIN = Path(sys.executable).parent
LOCATION = "nakodo-dagster"
# Around Leeds, 50 km, cafes and pubs: 12 cells in 4 blocks of 4 x 4 cells, so 4 import runs, two at a time.
CENTRE, RADIUS_KM, CATEGORIES = (53.8008, -1.5491), 50, ("cafe", "pub")
# Sensors tick every 30 s: the campaign is imported at the first tick, searched at the first tick after its places
# land (about a minute in all here, twice that on a loaded machine).
DEADLINE_SECONDS = 160
# One more import run, queued, started and run as the campaign's were.
BY_HAND_SECONDS = 60


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def database(pg_admin_url: str) -> Iterator[Callable[[], str]]:
    """``database()``: a fresh PostgreSQL database's URL; every one is dropped afterwards."""
    names: list[str] = []

    def create() -> str:
        name = f"nakodo_deploy_{uuid.uuid4().hex[:12]}"
        admin = psycopg2.connect(pg_admin_url)
        admin.autocommit = True
        try:
            with admin.cursor() as cursor:
                cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            admin.close()
        names.append(name)
        return f"{pg_admin_url.rpartition('/')[0]}/{name}"

    yield create
    admin = psycopg2.connect(pg_admin_url)
    admin.autocommit = True
    try:
        with admin.cursor() as cursor:
            for name in names:
                cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.close()


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    log: Path

    def tail(self, lines: int = 40) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace").splitlines()
        return f"--- {self.name} (exit {self.process.poll()}), last {lines} lines of {self.log}:\n" + "\n".join(
            text[-lines:]
        )


class Topology:
    """The three processes, their logs, and the webserver's GraphQL."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.services: list[Service] = []
        self.webserver_port = 0

    def start(self, name: str, command: list[str], env: dict[str, str]) -> None:
        log = self.folder / f"{name}.log"
        with log.open("w") as out:
            # A session of its own: stopping it stops what it spawned (the code server's gRPC child, run processes).
            process = subprocess.Popen(
                command, cwd=self.folder, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.services.append(Service(name, process, log))

    def logs(self) -> str:
        return "\n".join(service.tail() for service in self.services)

    def stop(self) -> None:
        for service in reversed(self.services):
            if service.process.poll() is None:
                os.killpg(service.process.pid, signal.SIGTERM)
        for service in reversed(self.services):
            try:
                service.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(service.process.pid, signal.SIGKILL)
                service.process.wait(timeout=10)
            # Whatever it left behind in its session (a run process, the gRPC child).
            with contextlib.suppress(ProcessLookupError):
                os.killpg(service.process.pid, signal.SIGKILL)

    def check_alive(self) -> None:
        for service in self.services:
            assert service.process.poll() is None, f"{service.name} exited\n{self.logs()}"

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.webserver_port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(request, timeout=30) as response:
            answer = json.load(response)
        assert not answer.get("errors"), answer
        return answer["data"]


def wait_for(topology: Topology, what: str, ready: Callable[[], object], deadline: float) -> object:
    """Poll ``ready`` until it returns something truthy; fail with every process's log when time runs out."""
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        topology.check_alive()
        try:
            if result := ready():
                return result
        except (OSError, AssertionError, KeyError) as error:
            last_error = error
        time.sleep(1)
    pytest.fail(f"timed out waiting for {what} (last error: {last_error!r})\n{topology.logs()}")


REPOSITORY = """
query {
  repositoriesOrError {
    __typename
    ... on RepositoryConnection {
      nodes {
        name
        location { name }
        jobs { name }
        assetNodes { assetKey { path } }
        sensors { name sensorState { status } }
      }
    }
    ... on PythonError { message }
  }
}"""

START_SENSOR = """
mutation Start($selector: SensorSelector!) {
  startSensor(sensorSelector: $selector) { __typename ... on PythonError { message } }
}"""

PLACES = """
query {
  assetNodeOrError(assetKey: {path: ["places"]}) {
    __typename
    ... on AssetNode { partitionStats { numMaterialized numFailed } }
  }
}"""

RUNS = """
query Runs($filter: RunsFilter) {
  runsOrError(filter: $filter) {
    __typename
    ... on Runs { results { runId jobName status startTime endTime } }
    ... on PythonError { message }
  }
}"""


# The UI's Materialize of one partition: a run of the asset job, the partition in its tags.
LAUNCH = """
mutation Launch($executionParams: ExecutionParams!) {
  launchRun(executionParams: $executionParams) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""

RUN = """
query Run($runId: ID!) {
  runOrError(runId: $runId) {
    __typename
    ... on Run { status tags { key value } }
  }
}"""


def runs(topology: Topology, **run_filter) -> list[dict]:
    answer = topology.graphql(RUNS, {"filter": run_filter})["runsOrError"]
    assert answer["__typename"] == "Runs", answer
    return answer["results"]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The most intervals that overlap at any moment (one ending as another starts does not overlap it)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    at_once = most = 0
    for _, change in events:
        at_once += change
        most = max(most, at_once)
    return most


def test_the_production_topology_imports_a_campaign_two_runs_at_a_time(database, release_root, tmp_path):
    started = time.monotonic()
    dagster_db = urlsplit(database())
    store_url = database()
    targeting = Targeting((PointLocation(*CENTRE, RADIUS_KM),), CATEGORIES)
    areas = areas_for(targeting)
    blocks = import_runs({area: list(CATEGORIES) for area in areas}, areas)
    assert len(blocks) > 2, "enough import runs for two at a time to be seen"

    # DAGSTER_HOME: the production instance, its run launcher swapped for the default one (no Kubernetes here).
    home = tmp_path / "dagster_home"
    home.mkdir()
    instance = production_instance()
    instance["run_launcher"] = {"module": "dagster", "class": "DefaultRunLauncher"}
    (home / "dagster.yaml").write_text(yaml.safe_dump(instance), encoding="utf-8")
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NAKODO_", "DAGSTER_", "AWS_"))}
    dagster_env = {
        **base,
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": dagster_db.hostname,
        "DAGSTER_PG_PORT": str(dagster_db.port or 5432),
        "DAGSTER_PG_USERNAME": dagster_db.username or "postgres",
        "DAGSTER_PG_PASSWORD": dagster_db.password or "",
        "DAGSTER_PG_DB": dagster_db.path.lstrip("/"),
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    nakodo_env = {
        **dagster_env,
        "NAKODO_DATABASE": store_url,
        "NAKODO_OVERTURE_ROOT": str(release_root),
        "NAKODO_OVERTURE_RELEASE": "",
        "NAKODO_OVERTURE_INDEX": str(tmp_path / "overture_index"),
    }

    def command(env: dict[str, str], program: str, *args: str) -> str:
        done = subprocess.run(
            [str(BIN / program), *args], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, f"{program} {' '.join(args)}: {done.returncode}\n{done.stdout}\n{done.stderr}"
        return done.stdout

    added = command(
        nakodo_env,
        "nakodo",
        "campaign", "add", "--name", "Leeds cafes and pubs", "--at", f"{CENTRE[0]},{CENTRE[1]}",
        "--radius-km", str(RADIUS_KM), *[arg for c in CATEGORIES for arg in ("--category", c)],
    )  # fmt: skip
    campaign = int(added.strip().splitlines()[-1])

    grpc_port = free_port()
    [cmd] = instructions("CMD")
    code_server = cmd.exec_form()
    # The image's command, on loopback and a free port, with this environment's `dagster`.
    code_server[0] = str(BIN / code_server[0])
    code_server[code_server.index("-h") + 1] = "127.0.0.1"
    code_server[code_server.index("-p") + 1] = str(grpc_port)
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        yaml.safe_dump(
            {"load_from": [{"grpc_server": {"host": "127.0.0.1", "port": grpc_port, "location_name": LOCATION}}]}
        ),
        encoding="utf-8",
    )
    # Dagster's storage made once before the services start, as an operator's `dagster instance migrate` does: the
    # webserver and the daemon, started at once against an empty database, both create its tables, and the one that
    # loses (PostgreSQL: type "instigators" already exists) exits. Kubernetes would restart its pod; nothing here does.
    command(dagster_env, "dagster", "instance", "migrate")
    topology = Topology(tmp_path)
    topology.webserver_port = free_port()
    try:
        topology.start("code-server", code_server, nakodo_env)
        topology.start(
            "webserver",
            [
                str(BIN / "dagster-webserver"),
                "-w",
                str(workspace),
                "-h",
                "127.0.0.1",
                "-p",
                str(topology.webserver_port),
            ],
            dagster_env,
        )
        topology.start("daemon", [str(BIN / "dagster-daemon"), "run", "-w", str(workspace)], dagster_env)
        deadline = started + DEADLINE_SECONDS

        # The UI answers, with the code location loaded from the code server.
        def repository() -> dict | None:
            answer = topology.graphql(REPOSITORY)["repositoriesOrError"]
            return answer["nodes"][0] if answer["__typename"] == "RepositoryConnection" and answer["nodes"] else None

        repo = wait_for(topology, "the webserver and the code location", repository, deadline)
        assert repo["location"]["name"] == LOCATION
        assert {"import_places", "search_campaigns_job"} <= {job["name"] for job in repo["jobs"]}
        assert ["places"] in [node["assetKey"]["path"] for node in repo["assetNodes"]]
        # The sensors run unattended: they are on by default; any that is not is started, as an operator would.
        for sensor in repo["sensors"]:
            if sensor["sensorState"]["status"] != "RUNNING":
                selector = {"repositoryLocationName": LOCATION, "repositoryName": repo["name"]}
                topology.graphql(START_SENSOR, {"selector": {**selector, "sensorName": sensor["name"]}})
        sensors = {s["name"]: s["sensorState"]["status"] for s in repository()["sensors"]}
        assert sensors["import_sensor"] == sensors["search_sensor"] == "RUNNING", sensors

        # Imported, then searched once everything landed.
        def done() -> bool:
            imports = runs(topology, tags=[{"key": tags.KIND, "value": tags.IMPORT_KIND}])
            if failed := [run for run in imports if run["status"] in ("FAILURE", "CANCELED")]:
                pytest.fail(f"import runs failed: {failed}\n{topology.logs()}")
            if len(imports) < len(blocks) or any(run["status"] != "SUCCESS" for run in imports):
                return False
            landed = max(run["endTime"] for run in imports)
            searches = runs(topology, pipelineName="search_campaigns_job", statuses=["SUCCESS"])
            return any(run["startTime"] > landed for run in searches)

        wait_for(topology, f"{len(blocks)} import runs and a search after them", done, deadline)

        imports = runs(topology, tags=[{"key": tags.KIND, "value": tags.IMPORT_KIND}])
        assert len(imports) == len(blocks), "one run per block, each once"
        # A run executes (start to end) inside the time the queue counts it in progress, so the run-tag limit holds
        # here too. Whether two actually overlapped depends on timing: starting a run process through the code
        # server takes longer here than an import of the sample release, so it is not asserted.
        assert most_at_once([(run["startTime"], run["endTime"]) for run in imports]) <= 2
        # The UI shows every pair the campaign needs as a materialised partition of `places`.
        places = topology.graphql(PLACES)["assetNodeOrError"]
        assert places["partitionStats"] == {"numMaterialized": len(areas) * len(CATEGORIES), "numFailed": 0}
        businesses = open_store(store_url).campaign_results(campaign)
        assert businesses, "the campaign found businesses"

        # An analyst reads the results with the CLI, from the same store.
        exported = command(nakodo_env, "nakodo", "results", str(campaign), "--format", "csv")
        rows = list(csv.DictReader(io.StringIO(exported)))
        assert [row["id"] for row in rows] == [business["id"] for business in businesses]
        assert {row["category"] for row in rows} <= set(CATEGORIES)
        distances = [float(row["distance_km"]) for row in rows]
        assert distances == sorted(distances) and distances[-1] <= RADIUS_KM

        # A pair imported again by hand from the UI: the webserver submits it through the instance's run queue, which
        # tags it as an import, so the import limit holds it like the sensor's runs; the daemon then starts it.
        [asset_job] = [job["name"] for job in repo["jobs"] if job["name"].startswith("__ASSET_JOB")]
        partition = str(places_partition(min(areas), CATEGORIES[0]))
        selector = {
            "repositoryLocationName": LOCATION,
            "repositoryName": repo["name"],
            "pipelineName": asset_job,
            "assetSelection": [{"path": ["places"]}],
        }
        params = {
            "selector": selector,
            "runConfigData": {},
            "mode": "default",
            "executionMetadata": {"tags": [{"key": "dagster/partition", "value": partition}]},
        }
        launched = topology.graphql(LAUNCH, {"executionParams": params})["launchRun"]
        assert launched["__typename"] == "LaunchRunSuccess", launched
        run_id = launched["run"]["runId"]
        by_hand = topology.graphql(RUN, {"runId": run_id})["runOrError"]
        assert {"key": tags.KIND, "value": tags.IMPORT_KIND} in by_hand["tags"], by_hand

        def by_hand_done() -> bool:
            status = topology.graphql(RUN, {"runId": run_id})["runOrError"]["status"]
            if status in ("FAILURE", "CANCELED"):
                pytest.fail(f"the run launched by hand ended {status}\n{topology.logs()}")
            return status == "SUCCESS"

        wait_for(topology, "the run launched by hand", by_hand_done, time.monotonic() + BY_HAND_SECONDS)
    finally:
        topology.stop()
