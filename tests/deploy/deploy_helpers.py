"""The production deployment's files, read as the tools that use them read them, and the parts of Dagster's Helm chart
the tests need: how the chart turns values.yaml into the instance (its `dagster-instance` ConfigMap) and into the
container context a code location hands its runs.

No Helm, chart or cluster is installed here. The two renderers below restate the chart's templates for the keys
values.yaml sets (`templates/helpers/instance/_run-launcher.tpl`, `_run-coordinator.tpl`, `_concurrency.tpl`,
`_postgresql.tpl`, `configmap-instance.yaml`, and the user-deployments subchart's `k8sContainerContext` helper); they
refuse a key they do not know, so a value added to values.yaml cannot slip past the tests unrendered. What they
produce is then judged by Dagster's own config schemas, not by this file.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ROOT / "deploy" / "production"
DOCKERFILE = PRODUCTION / "Dockerfile"
VALUES = PRODUCTION / "values.yaml"
INSTANCE = PRODUCTION / "dagster.yaml"
MANIFESTS = PRODUCTION / "nakodo.yaml"
UI = PRODUCTION / "ui.yaml"
NETWORK = PRODUCTION / "network.yaml"

# The Helm release the deployment is documented with (values.yaml's header): `helm upgrade --install dagster ... -n
# nakodo`. The chart names its objects after the release: a release named like the chart keeps the bare name.
RELEASE = "dagster"
NAMESPACE = "nakodo"
FULLNAME = RELEASE


def values() -> dict[str, Any]:
    return yaml.safe_load(VALUES.read_text(encoding="utf-8"))


def production_instance() -> dict[str, Any]:
    return yaml.safe_load(INSTANCE.read_text(encoding="utf-8"))


def manifests(path: Path = MANIFESTS) -> dict[tuple[str, str], dict[str, Any]]:
    """The Kubernetes objects of a manifest file (nakodo.yaml unless told) by (kind, name)."""
    documents = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    return {(d["kind"], d["metadata"]["name"]): d for d in documents}


def k8s_model(model_class: type, value: Mapping[str, Any]) -> Any:
    """A Kubernetes API object from its manifest form; unknown or misspelt keys and wrong types fail."""
    from dagster_k8s.models import k8s_model_from_dict, k8s_snake_case_dict

    return k8s_model_from_dict(model_class, k8s_snake_case_dict(model_class, value))


def user_deployment() -> dict[str, Any]:
    [deployment] = values()["dagster-user-deployments"]["deployments"]
    return deployment


def k8s_run_launcher_values() -> dict[str, Any]:
    return values()["runLauncher"]["config"]["k8sRunLauncher"]


def image_name(image: Mapping[str, Any]) -> str:
    return f"{image['repository']}:{image['tag']}"


def env_names(config: Any) -> set[str]:
    """Every environment variable a Dagster config reads (``{env: NAME}``), at any depth."""
    if isinstance(config, Mapping):
        if set(config) == {"env"} and isinstance(config["env"], str):
            return {config["env"]}
        return {name for value in config.values() for name in env_names(value)}
    if isinstance(config, list):
        return {name for value in config for name in env_names(value)}
    return set()


# -- the chart's instance -------------------------------------------------------------------------------------------

_K8S_RUN_LAUNCHER_KEYS = {
    "imagePullPolicy",
    "jobNamespace",
    "loadInclusterConfig",
    "kubeconfigFile",
    "envConfigMaps",
    "envSecrets",
    "envVars",
    "volumes",
    "volumeMounts",
    "labels",
    "resources",
    "failPodOnRunFailure",
    "schedulerName",
    "securityContext",
    "runK8sConfig",
}
_RUN_K8S_CONFIG_KEYS = {
    "containerConfig": "container_config",
    "podSpecConfig": "pod_spec_config",
    "podTemplateSpecMetadata": "pod_template_spec_metadata",
    "jobSpecConfig": "job_spec_config",
    "jobMetadata": "job_metadata",
}
_QUEUED_RUN_COORDINATOR_KEYS = {
    "maxConcurrentRuns": "max_concurrent_runs",
    "tagConcurrencyLimits": "tag_concurrency_limits",
    "dequeueIntervalSeconds": "dequeue_interval_seconds",
    "dequeueUseThreads": "dequeue_use_threads",
    "dequeueNumWorkers": "dequeue_num_workers",
}
_CUSTOM_RUN_COORDINATOR_KEYS = {"module", "class", "config"}
_PYTHON_LOGS_KEYS = {
    "pythonLogLevel": "python_log_level",
    "managedPythonLoggers": "managed_python_loggers",
    "dagsterHandlerConfig": "dagster_handler_config",
}
_RUN_MONITORING_KEYS = {
    "enabled": "enabled",
    "startTimeoutSeconds": "start_timeout_seconds",
    "cancelTimeoutSeconds": "cancel_timeout_seconds",
    "maxResumeRunAttempts": "max_resume_run_attempts",
    "pollIntervalSeconds": "poll_interval_seconds",
    "freeSlotsAfterRunEndSeconds": "free_slots_after_run_end_seconds",
}
_RUN_RETRIES_KEYS = {
    "enabled": "enabled",
    "maxRetries": "max_retries",
    "retryOnAssetOrOpFailure": "retry_on_asset_or_op_failure",
}
_COMPUTE_LOG_MANAGERS = {
    "NoOpComputeLogManager": ("dagster.core.storage.noop_compute_log_manager", "NoOpComputeLogManager"),
}


def _known(section: str, given: Mapping[str, Any], known: set[str] | Mapping[str, str]) -> None:
    unknown = set(given) - set(known)
    assert not unknown, f"values.yaml sets {section}.{sorted(unknown)}, which the tests do not render"


def _name_refs(sources: list[Mapping[str, str]]) -> list[str]:
    return [source["name"] for source in sources if "name" in source]


def render_run_launcher(v: Mapping[str, Any]) -> dict[str, Any]:
    """`dagsterYaml.runLauncher.k8s`: the run_launcher entry of the chart's instance."""
    assert v["runLauncher"]["type"] == "K8sRunLauncher"
    launcher = v["runLauncher"]["config"]["k8sRunLauncher"]
    _known("runLauncher.config.k8sRunLauncher", launcher, _K8S_RUN_LAUNCHER_KEYS)
    config: dict[str, Any] = {
        "load_incluster_config": launcher["loadInclusterConfig"],
        "job_namespace": launcher.get("jobNamespace") or NAMESPACE,
        "image_pull_policy": launcher["imagePullPolicy"],
        "service_account_name": v.get("global", {}).get("serviceAccountName") or FULLNAME,
        "dagster_home": v["global"]["dagsterHome"],
        "instance_config_map": f"{FULLNAME}-instance",
        "postgres_password_secret": v["global"]["postgresqlSecretName"],
    }
    if launcher.get("kubeconfigFile"):
        config["kubeconfig_file"] = launcher["kubeconfigFile"]
    if launcher.get("envConfigMaps"):
        config["env_config_maps"] = _name_refs(launcher["envConfigMaps"])
    if launcher.get("envSecrets"):
        config["env_secrets"] = _name_refs(launcher["envSecrets"])
    for key, name in (
        ("envVars", "env_vars"),
        ("volumeMounts", "volume_mounts"),
        ("volumes", "volumes"),
        ("labels", "labels"),
        ("resources", "resources"),
        ("securityContext", "security_context"),
    ):
        if launcher.get(key):
            config[name] = launcher[key]
    if launcher.get("failPodOnRunFailure"):
        config["fail_pod_on_run_failure"] = True
    if launcher.get("schedulerName"):
        config["scheduler_name"] = launcher["schedulerName"]
    if launcher.get("runK8sConfig"):
        _known("runLauncher.config.k8sRunLauncher.runK8sConfig", launcher["runK8sConfig"], _RUN_K8S_CONFIG_KEYS)
        config["run_k8s_config"] = {
            _RUN_K8S_CONFIG_KEYS[key]: value for key, value in launcher["runK8sConfig"].items() if value
        }
    return {"module": "dagster_k8s", "class": "K8sRunLauncher", "config": config}


def _postgres_config(v: Mapping[str, Any]) -> dict[str, Any]:
    """`dagsterYaml.postgresql.config`: the same for the run, event log and schedule storage."""
    pg = v["postgresql"]
    config = {
        "username": pg["postgresqlUsername"],
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "hostname": pg["postgresqlHost"],
        "db_name": pg["postgresqlDatabase"],
        "port": pg["service"]["port"],
        "params": pg.get("postgresqlParams") or {},
    }
    if pg.get("postgresqlScheme"):
        config["scheme"] = pg["postgresqlScheme"]
    return {"postgres_db": config}


def _render_run_coordinator(coordinator: Mapping[str, Any], concurrency: Mapping[str, Any]) -> dict[str, Any]:
    """`dagsterYaml.runCoordinator.queued` or `.custom`, as `dagsterDaemon.runCoordinator.type` picks; the chart
    ignores the other type's config."""
    types = {"queuedRunCoordinator", "customRunCoordinator"}
    _known("dagsterDaemon.runCoordinator.config", coordinator["config"], types)
    if coordinator["type"] == "CustomRunCoordinator":
        custom = coordinator["config"]["customRunCoordinator"]
        _known("dagsterDaemon.runCoordinator.config.customRunCoordinator", custom, _CUSTOM_RUN_COORDINATOR_KEYS)
        # The class's own config, in Dagster's keys: the chart writes it out as it is.
        return {"module": custom["module"], "class": custom["class"], "config": custom.get("config") or {}}
    assert coordinator["type"] == "QueuedRunCoordinator", coordinator["type"]
    queued = coordinator["config"]["queuedRunCoordinator"]
    _known("dagsterDaemon.runCoordinator.config.queuedRunCoordinator", queued, _QUEUED_RUN_COORDINATOR_KEYS)
    config = {_QUEUED_RUN_COORDINATOR_KEYS[key]: value for key, value in queued.items() if value}
    # With `concurrency` on, the chart leaves the run limit to it unless it is set here too.
    if not concurrency.get("enabled") and queued.get("maxConcurrentRuns") is None:
        config["max_concurrent_runs"] = -1
    return {"module": "dagster.core.run_coordinator", "class": "QueuedRunCoordinator", "config": config}


def render_instance(v: Mapping[str, Any]) -> dict[str, Any]:
    """The chart's `dagster-instance` ConfigMap (`configmap-instance.yaml`), for the entries values.yaml decides."""
    daemon = v["dagsterDaemon"]
    assert daemon["enabled"]
    storage = _postgres_config(v)
    instance: dict[str, Any] = {
        "run_storage": {
            "module": "dagster_postgres.run_storage",
            "class": "PostgresRunStorage",
            "config": storage,
        },
        "event_log_storage": {
            "module": "dagster_postgres.event_log",
            "class": "PostgresEventLogStorage",
            "config": storage,
        },
        "schedule_storage": {
            "module": "dagster_postgres.schedule_storage",
            "class": "PostgresScheduleStorage",
            "config": storage,
        },
        "run_launcher": render_run_launcher(v),
    }
    concurrency = v.get("concurrency", {})
    coordinator = daemon["runCoordinator"]
    if coordinator["enabled"]:
        instance["run_coordinator"] = _render_run_coordinator(coordinator, concurrency)
    module, klass = _COMPUTE_LOG_MANAGERS[v["computeLogManager"]["type"]]
    instance["compute_logs"] = {"module": module, "class": klass}
    monitoring = daemon["runMonitoring"]
    if monitoring["enabled"]:
        _known("dagsterDaemon.runMonitoring", monitoring, _RUN_MONITORING_KEYS)
        instance["run_monitoring"] = {_RUN_MONITORING_KEYS[key]: value for key, value in monitoring.items()}
    retries = daemon.get("runRetries", {})
    if retries.get("enabled"):
        _known("dagsterDaemon.runRetries", retries, _RUN_RETRIES_KEYS)
        instance["run_retries"] = {_RUN_RETRIES_KEYS[key]: value for key, value in retries.items()}
    sensors = daemon["sensors"]
    if sensors["useThreads"]:
        instance["sensors"] = {"use_threads": True, "num_workers": sensors["numWorkers"]}
    instance["telemetry"] = {"enabled": v["telemetry"]["enabled"]}
    python_logs = v.get("pythonLogs") or {}
    _known("pythonLogs", python_logs, _PYTHON_LOGS_KEYS)
    if python_logs:
        instance["python_logs"] = {_PYTHON_LOGS_KEYS[key]: value for key, value in python_logs.items() if value}
    if concurrency.get("enabled"):
        pools, runs = concurrency.get("pools", {}), concurrency.get("runs", {})
        _known("concurrency.pools", pools, {"defaultLimit", "granularity", "opGranularityRunBuffer"})
        _known("concurrency.runs", runs, {"maxConcurrentRuns", "tagConcurrencyLimits"})
        rendered: dict[str, Any] = {}
        pool_keys = {"defaultLimit": "default_limit", "granularity": "granularity"}
        pool_keys["opGranularityRunBuffer"] = "op_granularity_run_buffer"
        if any(pools.get(key) is not None for key in pool_keys):
            rendered["pools"] = {name: pools[key] for key, name in pool_keys.items() if pools.get(key) is not None}
        run_limits: dict[str, Any] = {}
        if runs.get("maxConcurrentRuns") is not None:
            run_limits["max_concurrent_runs"] = runs["maxConcurrentRuns"]
        if runs.get("tagConcurrencyLimits"):
            run_limits["tag_concurrency_limits"] = [
                {key: limit[key] for key in ("key", "value", "limit") if limit.get(key) is not None}
                for limit in runs["tagConcurrencyLimits"]
            ]
        if run_limits:
            rendered["runs"] = run_limits
        instance["concurrency"] = rendered
    return instance


def render_code_location_container_context(v: Mapping[str, Any], deployment: Mapping[str, Any]) -> dict[str, Any]:
    """`dagsterUserDeployments.k8sContainerContext`: what the chart passes a code server (DAGSTER_CONTAINER_CONTEXT),
    which hands it to every run of its code when `includeConfigInLaunchedRuns` is on."""
    k8s: dict[str, Any] = {
        "image_pull_policy": deployment["image"]["pullPolicy"],
        "env_config_maps": [
            f"{FULLNAME}-{deployment['name']}-user-env",
            *_name_refs(deployment.get("envConfigMaps", [])),
        ],
        "namespace": NAMESPACE,
        "service_account_name": f"{FULLNAME}-user-deployments",
        "run_k8s_config": {"pod_spec_config": {"automount_service_account_token": True}},
    }
    if deployment.get("envSecrets"):
        k8s["env_secrets"] = _name_refs(deployment["envSecrets"])
    for key, name in (("volumeMounts", "volume_mounts"), ("volumes", "volumes"), ("resources", "resources")):
        if deployment.get(key):
            k8s[name] = deployment[key]
    if isinstance(deployment.get("env"), list):
        k8s["env"] = deployment["env"]
    return {"k8s": k8s}


# -- the chart's webservers, daemon and code server ---------------------------------------------------------------

_WEBSERVER_KEYS = {"replicaCount", "image", "enableReadOnly", "service", "readinessProbe", "labels"}
_WEBSERVER_SERVICE_KEYS = {"type", "port"}


@dataclass(frozen=True)
class ChartService:
    """A Service the chart makes: its name, type, port and the pod labels it selects."""

    name: str
    type: str
    port: int
    selector: Mapping[str, str]


def _selector_labels(chart_name: str) -> dict[str, str]:
    """`dagster.selectorLabels`: the chart's name (or the subchart's) and the release."""
    return {"app.kubernetes.io/name": chart_name, "app.kubernetes.io/instance": RELEASE}


def render_webserver_command(v: Mapping[str, Any], read_only: bool) -> list[str]:
    """`dagster.webserver.dagsterWebserverCommand`: what the webserver's container runs (`/bin/bash -c` it)."""
    webserver = v["dagsterWebserver"]
    _known("dagsterWebserver", webserver, _WEBSERVER_KEYS)
    _known("dagsterWebserver.service", webserver["service"], _WEBSERVER_SERVICE_KEYS)
    command = ["dagster-webserver", "-h", "0.0.0.0", "-p", str(webserver["service"]["port"])]
    if v["dagster-user-deployments"]["enabled"]:
        command += ["-w", "/dagster-workspace/workspace.yaml"]
    return [*command, "--read-only"] if read_only else command


def render_chart_pods(v: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The pod labels of what the chart runs, by role: `deployment-webserver.yaml` (twice with `enableReadOnly`),
    `deployment-daemon.yaml`, and the user-deployments subchart's `deployment-user.yaml`, whose chart name is its
    own (`dagster-user-deployments`)."""
    webserver = v["dagsterWebserver"]
    _known("dagsterWebserver", webserver, _WEBSERVER_KEYS)
    pods = {
        "webserver": {**_selector_labels("dagster"), "component": "dagster-webserver", **webserver.get("labels", {})}
    }
    if webserver.get("enableReadOnly"):
        pods["webserver-read-only"] = {
            **_selector_labels("dagster"),
            "component": "dagster-webserver-read-only",
            **webserver.get("labels", {}),
        }
    if v["dagsterDaemon"]["enabled"]:
        pods["daemon"] = {**_selector_labels("dagster"), "component": "dagster-daemon", "deployment": "daemon"}
    [deployment] = v["dagster-user-deployments"]["deployments"]
    pods["code-server"] = {
        **_selector_labels("dagster-user-deployments"),
        "component": "user-deployments",
        "deployment": deployment["name"],
        **deployment.get("labels", {}),
    }
    return pods


def render_webserver_services(v: Mapping[str, Any]) -> dict[str, ChartService]:
    """`service-webserver.yaml` by role: `<release>-webserver` and, with `enableReadOnly`, its `-read-only` twin."""
    webserver = v["dagsterWebserver"]
    service = webserver["service"]
    roles = {"webserver": ("", "dagster-webserver")}
    if webserver.get("enableReadOnly"):
        roles["webserver-read-only"] = ("-read-only", "dagster-webserver-read-only")
    return {
        role: ChartService(
            name=f"{RELEASE}-webserver{suffix}",
            type=service.get("type") or "ClusterIP",
            port=service.get("port") or 80,
            selector={**_selector_labels("dagster"), "component": component},
        )
        for role, (suffix, component) in roles.items()
    }


# -- the Dockerfile ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    keyword: str
    argument: str

    def exec_form(self) -> list[str]:
        """A JSON-array argument (CMD ["a", "b"]), as Docker parses it."""
        words = json.loads(self.argument)
        assert isinstance(words, list) and all(isinstance(w, str) for w in words), self
        return words

    def words(self) -> list[str]:
        return shlex.split(self.argument)


def dockerfile() -> list[Instruction]:
    """The Dockerfile's instructions in order: comments dropped, continued lines joined."""
    logical: list[str] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        logical.append(pending + stripped)
        pending = ""
    assert not pending, "the Dockerfile ends in a continued line"
    return [Instruction(*re.split(r"\s+", line, maxsplit=1)) for line in logical]


def instructions(keyword: str) -> Iterator[Instruction]:
    return (i for i in dockerfile() if i.keyword.upper() == keyword)


# -- the Kubernetes Job of a run ---------------------------------------------------------------------------------


RUN_ID = "00000000-0000-4000-8000-000000000000"


class _CapturedJobs:
    """Stands in for Kubernetes' batch API: keeps the Jobs the run launcher asks to create."""

    def __init__(self) -> None:
        self.created: list[tuple[str, Any]] = []

    def create_namespaced_job(self, body: Any, namespace: str, **_: Any) -> None:
        self.created.append((namespace, body))


def run_job(
    launcher_config: Mapping[str, Any], image: str, container_context: Mapping[str, Any] | None, monkeypatch
) -> tuple[str, dict[str, Any]]:
    """(namespace, Job as a dict) that dagster-k8s's K8sRunLauncher creates for an `import_places` run of the code
    location served from ``image`` with ``container_context``, configured by ``launcher_config``.

    Built by the launcher's own code path (`launch_run`); only the cluster is missing: no kube credentials are
    loaded and the Job is kept instead of sent.
    """
    import dagster as dg
    import dagster_k8s.launcher
    from dagster._config import process_config
    from dagster._core.code_pointer import ModuleCodePointer
    from dagster._core.launcher import LaunchRunContext
    from dagster._core.origin import JobPythonOrigin, RepositoryPythonOrigin
    from dagster._core.storage.dagster_run import DagsterRun
    from dagster_k8s import K8sRunLauncher

    processed = process_config(K8sRunLauncher.config_type(), dict(launcher_config))
    assert processed.success, processed.errors
    monkeypatch.setattr(dagster_k8s.launcher, "load_kubernetes_config", lambda **_: None)
    jobs = _CapturedJobs()
    launcher = K8sRunLauncher(**processed.value, k8s_client_batch_api=jobs, k8s_client_core_api=object())
    origin = JobPythonOrigin(
        "import_places",
        RepositoryPythonOrigin(
            executable_path="/usr/local/bin/python",
            code_pointer=ModuleCodePointer("nakodo_dagster.definitions", "defs", None),
            container_image=image,
            container_context=dict(container_context) if container_context else None,
        ),
    )
    with dg.instance_for_test() as instance:
        launcher.register_instance(instance)
        run = instance.add_run(DagsterRun(job_name="import_places", run_id=RUN_ID, job_code_origin=origin))
        launcher.launch_run(LaunchRunContext(dagster_run=run, workspace=None))
    [(namespace, job)] = jobs.created
    return namespace, job.to_dict()
