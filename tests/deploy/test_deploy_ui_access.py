"""Production's UI for the right people: deploy/production/ui.yaml and network.yaml beside the chart's values.

- Analysts reach the chart's read-only webserver (`dagsterWebserver.enableReadOnly`), which refuses to launch,
  cancel or switch a sensor (checked on a real `dagster-webserver` run with the chart's own arguments).
- The webserver that can do those is reached only through oauth2-proxy: no Ingress, Service type or policy leads to
  it otherwise.
- The NetworkPolicies are read as a network plugin enforces them (network_policy.py) against the pods as the chart's
  templates and dagster-k8s's run launcher label them: each policy applies to the pods it means, and every pod
  reaches exactly what it needs.
- No secret is written in any deployment file.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from importlib.resources import files
from pathlib import Path

import dagster as dg
import kubernetes.client as k8s
import pytest
import yaml
from deploy_helpers import (
    NETWORK,
    PRODUCTION,
    UI,
    image_name,
    k8s_model,
    manifests,
    render_chart_pods,
    render_code_location_container_context,
    render_instance,
    render_webserver_command,
    render_webserver_services,
    run_job,
    user_deployment,
    values,
)
from network_policy import Address, Pod, allowed, selected

from nakodo_dagster.redact import redacted_url

MODELS = {
    "Deployment": k8s.V1Deployment,
    "Service": k8s.V1Service,
    "Ingress": k8s.V1Ingress,
    "NetworkPolicy": k8s.V1NetworkPolicy,
}
NAMESPACE = "nakodo"


def ui_objects() -> dict[tuple[str, str], dict]:
    return manifests(UI)


def policies() -> list[dict]:
    return list(manifests(NETWORK).values())


def proxy_args() -> list[str]:
    [container] = ui_objects()["Deployment", "oauth2-proxy"]["spec"]["template"]["spec"]["containers"]
    return container["args"]


def test_the_ui_and_network_objects_are_valid_kubernetes():
    for path in (UI, NETWORK):
        for (kind, name), manifest in manifests(path).items():
            k8s_model(MODELS[kind], manifest)
            assert manifest["metadata"]["namespace"] == NAMESPACE, (kind, name)
    proxy = ui_objects()["Deployment", "oauth2-proxy"]
    assert proxy["spec"]["selector"]["matchLabels"] == proxy["spec"]["template"]["metadata"]["labels"]
    assert (
        ui_objects()["Service", "oauth2-proxy"]["spec"]["selector"] == proxy["spec"]["template"]["metadata"]["labels"]
    )


def test_the_chart_runs_a_read_only_webserver_beside_the_writable_one():
    chart = values()
    writable, read_only = render_webserver_command(chart, False), render_webserver_command(chart, True)
    assert "--read-only" not in writable
    assert read_only == [*writable, "--read-only"]
    services = render_webserver_services(chart)
    assert {service.name for service in services.values()} == {"dagster-webserver", "dagster-webserver-read-only"}
    pods = render_chart_pods(chart)
    for role, service in services.items():
        # Inside the cluster only, each selecting its own webserver's pods and no other.
        assert service.type == "ClusterIP"
        assert {name for name, labels in pods.items() if dict(labels, **service.selector) == labels} == {role}


def test_the_writable_webserver_has_no_route_but_through_the_proxy():
    chart = values()
    # The chart's own Ingress would route a host straight to the writable webserver.
    assert chart["ingress"]["enabled"] is False
    services = render_webserver_services(chart)
    writable, read_only = services["webserver"], services["webserver-read-only"]
    backends = {
        (path["backend"]["service"]["name"], path["backend"]["service"]["port"]["number"])
        for (kind, _), ingress in ui_objects().items()
        if kind == "Ingress"
        for rule in ingress["spec"]["rules"]
        for path in rule["http"]["paths"]
    }
    proxy_service = ui_objects()["Service", "oauth2-proxy"]["spec"]
    assert backends == {(read_only.name, read_only.port), ("oauth2-proxy", proxy_service["ports"][0]["port"])}
    # The proxy's one upstream is the writable webserver's Service, and it lets through only the group's members.
    args = dict(arg.removeprefix("--").split("=", 1) for arg in proxy_args())
    assert args["upstream"] == f"http://{writable.name}.{NAMESPACE}.svc.cluster.local:{writable.port}/"
    assert args["allowed-group"] and args["provider"] == "oidc"
    assert not {"skip-auth-regex", "skip-auth-route", "skip-jwt-bearer-tokens"} & set(args)
    assert proxy_service["type"] == "ClusterIP"


# -- the NetworkPolicies ------------------------------------------------------------------------------------------

# What is not the chart's: labelled as the charts that usually run them label their pods (ingress-nginx's controller,
# Bitnami's PostgreSQL, the cluster's CoreDNS).
INGRESS_CONTROLLER = Pod(
    "ingress-controller",
    "ingress-nginx",
    {"app.kubernetes.io/name": "ingress-nginx", "app.kubernetes.io/component": "controller"},
)
POSTGRESQL = Pod(
    "postgresql",
    NAMESPACE,
    {
        "app.kubernetes.io/name": "postgresql",
        "app.kubernetes.io/instance": "nakodo-postgres",
        "app.kubernetes.io/component": "primary",
    },
)
DNS = Pod("dns", "kube-system", {"k8s-app": "kube-dns"})
# Anyone else: a debugging pod in the namespace, and a pod elsewhere that wears the ingress controller's labels.
STRANGER = Pod("stranger", NAMESPACE, {"run": "debug"})
IMPOSTOR = Pod("impostor", "default", {"app.kubernetes.io/name": "ingress-nginx"})
OUTSIDE = [
    Address("object-store", "52.218.133.10"),
    Address("identity-provider", "34.117.59.81"),
    Address("kubernetes-api", "10.0.0.1"),
    Address("cloud-metadata", "169.254.169.254"),
    Address("database-elsewhere", "192.168.40.7"),
]
# (endpoint, port, protocol) pairs that something listens on.
LISTENING = [
    ("webserver", 3000, "TCP"),
    ("webserver-read-only", 3000, "TCP"),
    ("oauth2-proxy", 4180, "TCP"),
    ("code-server", 4000, "TCP"),
    ("postgresql", 5432, "TCP"),
    ("stranger", 8080, "TCP"),
    ("dns", 53, "UDP"),
    ("dns", 53, "TCP"),
    ("object-store", 443, "TCP"),
    ("identity-provider", 443, "TCP"),
    ("kubernetes-api", 443, "TCP"),
    ("kubernetes-api", 6443, "TCP"),
    ("cloud-metadata", 80, "TCP"),
    ("database-elsewhere", 5432, "TCP"),
]


@pytest.fixture
def pods(monkeypatch) -> dict[str, Pod]:
    """Every pod by role, the chart's labelled as its templates label them, a run's as K8sRunLauncher does."""
    chart = values()
    found = {role: Pod(role, NAMESPACE, labels) for role, labels in render_chart_pods(chart).items()}
    deployment = user_deployment()
    context = render_code_location_container_context(chart, deployment)
    launcher = render_instance(chart)["run_launcher"]["config"]
    namespace, job = run_job(launcher, image_name(deployment["image"]), context, monkeypatch)
    found["run-pod"] = Pod("run-pod", namespace, job["spec"]["template"]["metadata"]["labels"])
    proxy = ui_objects()["Deployment", "oauth2-proxy"]
    found["oauth2-proxy"] = Pod(
        "oauth2-proxy", proxy["metadata"]["namespace"], proxy["spec"]["template"]["metadata"]["labels"]
    )
    for pod in (INGRESS_CONTROLLER, POSTGRESQL, DNS, STRANGER, IMPOSTOR):
        found[pod.name] = pod
    return found


def test_each_policy_applies_to_the_pods_it_means(pods):
    in_namespace = {name for name, pod in pods.items() if pod.namespace == NAMESPACE}
    meant = {
        "default-deny": in_namespace,
        "dns": in_namespace,
        "oauth2-proxy": {"oauth2-proxy"},
        "dagster-webserver": {"webserver"},
        "dagster-webserver-read-only": {"webserver-read-only"},
        "dagster-daemon": {"daemon"},
        "code-server": {"code-server"},
        "run-pods": {"run-pod"},
        "postgresql": {"postgresql"},
    }
    assert {policy["metadata"]["name"]: selected(policy, pods.values()) for policy in policies()} == meant


DNS_LOOKUPS = {("dns", 53, "UDP"), ("dns", 53, "TCP")}
PUBLIC_HTTPS = {("object-store", 443, "TCP"), ("identity-provider", 443, "TCP")}
KUBERNETES_API = {("kubernetes-api", 443, "TCP"), ("kubernetes-api", 6443, "TCP")}
DAGSTER_SERVICE = {("code-server", 4000, "TCP"), ("postgresql", 5432, "TCP")}
# Who reaches what: the whole intended topology, written out.
REACHES = {
    "ingress-controller": {("webserver-read-only", 3000, "TCP"), ("oauth2-proxy", 4180, "TCP")},
    "impostor": set(),
    "stranger": DNS_LOOKUPS,
    "oauth2-proxy": DNS_LOOKUPS | PUBLIC_HTTPS | {("webserver", 3000, "TCP")},
    "webserver": DNS_LOOKUPS | DAGSTER_SERVICE | KUBERNETES_API,
    "webserver-read-only": DNS_LOOKUPS | DAGSTER_SERVICE,
    "daemon": DNS_LOOKUPS | DAGSTER_SERVICE | KUBERNETES_API,
    "code-server": DNS_LOOKUPS | PUBLIC_HTTPS | {("postgresql", 5432, "TCP")},
    "run-pod": DNS_LOOKUPS | PUBLIC_HTTPS | {("postgresql", 5432, "TCP")},
    "postgresql": DNS_LOOKUPS,
}


def test_every_pod_reaches_exactly_what_it_needs(pods):
    endpoints = {**pods, **{address.name: address for address in OUTSIDE}}
    rules = policies()
    reached = {}
    for source in REACHES:
        reached[source] = {
            (name, port, protocol)
            for name, port, protocol in LISTENING
            # Outside the namespace, only what reaches into it is the policies' business.
            if (pods[source].namespace == NAMESPACE or getattr(endpoints[name], "namespace", None) == NAMESPACE)
            and allowed(rules, pods[source], endpoints[name], port, protocol)
        }
    assert reached == REACHES


def test_only_the_proxy_reaches_the_writable_webserver_on_any_port(pods):
    rules = policies()
    for port in (3000, 80, 443, 8080):
        reaching = {name for name, pod in pods.items() if allowed(rules, pod, pods["webserver"], port)}
        assert reaching == ({"oauth2-proxy"} if port == 3000 else set()), port


# -- secrets ------------------------------------------------------------------------------------------------------

SECRET_WORDS = ("SECRET", "PASSWORD", "TOKEN", "KEY", "CREDENTIAL")


def _strings(node):
    if isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)
    elif isinstance(node, str):
        yield node


def _env_vars(node):
    """Every `env` entry of a container, at any depth of a manifest or of Helm values."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "env" and isinstance(value, list):
                yield from value
            else:
                yield from _env_vars(value)
    elif isinstance(node, list):
        for value in node:
            yield from _env_vars(value)


def test_no_secret_is_written_in_the_deployment_files():
    documents = [
        document
        for path in sorted(PRODUCTION.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8"))
        if document
    ]
    assert {path.name for path in PRODUCTION.glob("*.yaml")} >= {"values.yaml", "dagster.yaml", "ui.yaml"}
    assert not [d for d in documents if d.get("kind") == "Secret"], "Secrets are made by hand, never kept here"
    for variable in _env_vars(documents):
        if any(word in variable["name"].upper() for word in SECRET_WORDS):
            assert "value" not in variable and variable["valueFrom"]["secretKeyRef"]["name"], variable
    for text in _strings(documents):
        # No password in a URL or connection string, nor given to a program as an argument.
        assert redacted_url(text) == text, text
        flag = text.removeprefix("--").split("=", 1)
        assert not (text.startswith("--") and len(flag) == 2 and any(w.lower() in flag[0] for w in SECRET_WORDS)), text
    # The Dagster instance names its database password by variable only.
    assert "password: {env: DAGSTER_PG_PASSWORD}" in (PRODUCTION / "dagster.yaml").read_text()


# -- the read-only webserver, run --------------------------------------------------------------------------------

RUN_ID = "11111111-2222-4333-8444-555555555555"
REFUSED = """
mutation Refused($executionParams: ExecutionParams!, $runId: String!) {
  launchRun(executionParams: $executionParams) { __typename }
  terminateRun(runId: $runId) { __typename ... on TerminateRunFailure { message } }
  stopSensor(jobOriginId: "import_sensor", jobSelectorId: "import_sensor") { __typename }
}
"""
READ = "{ repositoriesOrError { ... on RepositoryConnection { nodes { name sensors { name } } } } }"


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _graphql(port: int, query: str, variables: dict | None = None) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as answer:
        return json.loads(answer.read())


@pytest.mark.slow
def test_the_read_only_webserver_shows_runs_but_refuses_to_launch_cancel_or_stop_a_sensor(tmp_path):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(files("nakodo_dagster").joinpath("data", "dagster.yaml").read_text("utf-8"))
    workspace = tmp_path / "workspace.yaml"
    location = {
        "module_name": "nakodo_dagster.definitions",
        "location_name": "nakodo-dagster",
        "working_directory": str(tmp_path),
    }
    workspace.write_text(yaml.safe_dump({"load_from": [{"python_module": location}]}))
    # A run in flight, which an operator could cancel; its storage made here, before the webserver opens it.
    with dg.DagsterInstance.from_config(str(home)) as instance:
        instance.add_run(dg.DagsterRun(job_name="import_places", run_id=RUN_ID, status=dg.DagsterRunStatus.STARTED))
    # The chart's read-only command, on loopback and this workspace: its flags after the workspace are the chart's.
    chart_command = render_webserver_command(values(), True)
    port = _free_port()
    command = [str(Path(sys.executable).with_name("dagster-webserver")), "-h", "127.0.0.1", "-p", str(port)]
    command += ["-w", str(workspace), *chart_command[chart_command.index("-w") + 2 :]]
    environ = {
        "PATH": str(Path(sys.executable).parent),
        "HOME": str(tmp_path),
        "DAGSTER_HOME": str(home),
        "NAKODO_DATABASE": str(tmp_path / "store.duckdb"),
        "NAKODO_OVERTURE_ROOT": "",
    }
    log = (tmp_path / "webserver.log").open("w")
    server = subprocess.Popen(command, cwd=tmp_path, env=environ, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None, (tmp_path / "webserver.log").read_text()
            try:
                repositories = _graphql(port, READ)["data"]["repositoriesOrError"]["nodes"]
                if repositories:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "webserver.log").read_text()
            time.sleep(1)
        # It serves the code location: analysts see the sensors and the runs.
        [repository] = repositories
        assert {"import_sensor", "search_sensor"} <= {sensor["name"] for sensor in repository["sensors"]}
        # A partition of places materialised with accept: true, past the drift gate; a cancel; a sensor stopped.
        selector = {
            "repositoryLocationName": "nakodo-dagster",
            "repositoryName": repository["name"],
            "pipelineName": "__ASSET_JOB",
            "assetSelection": [{"path": ["places"]}],
        }
        params = {"selector": selector, "runConfigData": {"ops": {"places": {"config": {"accept": True}}}}}
        refused = _graphql(port, REFUSED, {"executionParams": params, "runId": RUN_ID})["data"]
        assert refused == {
            "launchRun": {"__typename": "UnauthorizedError"},
            "terminateRun": {
                "__typename": "TerminateRunFailure",
                "message": "You do not have permission to terminate this run",
            },
            "stopSensor": {"__typename": "UnauthorizedError"},
        }
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_runs_count() == 1
        assert instance.get_run_by_id(RUN_ID).status == dg.DagsterRunStatus.STARTED
