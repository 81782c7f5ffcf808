"""deploy/production/values.yaml for Dagster's Helm chart (and nakodo.yaml beside it).

The chart's own values schema (values.schema.json, generated from its pydantic models) is not installed here: it
ships with the chart, not with any Python package, and no chart can be fetched. So values.yaml is judged this way:
- the Kubernetes objects in it (volumes, mounts, env sources, security contexts, resources) and in nakodo.yaml by
  the Kubernetes API models of the `kubernetes` client, through dagster-k8s's strict converter;
- the instance the chart renders from it (deploy_helpers.render_instance restates the chart's templates for the
  keys set here) by Dagster's instance schema, dagster-postgres's storage schemas and K8sRunLauncher's schema, and
  compared with deploy/production/dagster.yaml;
- the Job a run gets in that deployment, built by K8sRunLauncher's own code with the code location's container
  context as the chart passes it;
- the user deployment by the chart's rules that Dagster's schemas cannot see (names, args, what is left unset), and
  the webserver and the daemon on its image, which holds the instance's run queue.
"""

from __future__ import annotations

import re
import tomllib
from importlib.resources import files

import kubernetes.client as k8s
import pytest
import yaml
from dagster._config import process_config
from dagster._core.instance.config import dagster_instance_config
from dagster._serdes.config_class import class_from_code_pointer
from dagster_k8s import K8sRunLauncher
from dagster_k8s.container_context import K8sContainerContext
from dagster_postgres import PostgresEventLogStorage, PostgresRunStorage, PostgresScheduleStorage
from deploy_helpers import (
    ROOT,
    image_name,
    k8s_model,
    k8s_run_launcher_values,
    manifests,
    production_instance,
    render_code_location_container_context,
    render_instance,
    run_job,
    user_deployment,
    values,
)

from nakodo_dagster import tags
from nakodo_dagster.coordinator import ImportTaggingRunCoordinator


def test_the_kubernetes_objects_in_values_are_valid_kubernetes():
    deployment, launcher = user_deployment(), k8s_run_launcher_values()
    for source in [*deployment["envConfigMaps"], *launcher["envConfigMaps"]]:
        k8s_model(k8s.V1ConfigMapEnvSource, source)
    for source in [*deployment["envSecrets"], *launcher["envSecrets"]]:
        k8s_model(k8s.V1SecretEnvSource, source)
    for volume in [*deployment["volumes"], *launcher["volumes"]]:
        k8s_model(k8s.V1Volume, volume)
    for mount in [*deployment["volumeMounts"], *launcher["volumeMounts"]]:
        k8s_model(k8s.V1VolumeMount, mount)
    k8s_model(k8s.V1PodSecurityContext, deployment["podSecurityContext"])
    k8s_model(k8s.V1ResourceRequirements, launcher["resources"])
    k8s_model(k8s.V1PodSpec, {"containers": [], **launcher["runK8sConfig"]["podSpecConfig"]})


def test_the_manifests_beside_the_chart_are_valid_kubernetes():
    models = {"ConfigMap": k8s.V1ConfigMap, "PersistentVolumeClaim": k8s.V1PersistentVolumeClaim}
    objects = manifests()
    assert {kind for kind, _ in objects} == set(models)
    for (kind, _), manifest in objects.items():
        k8s_model(models[kind], manifest)
    # The ConfigMap is `data`, strings only: an unquoted empty value would be null and refused by the API server.
    assert all(isinstance(value, str) for value in objects["ConfigMap", "nakodo-env"]["data"].values())


def test_the_instance_the_chart_renders_passes_dagsters_schemas(tmp_path, monkeypatch):
    # The chart gives every Dagster pod DAGSTER_PG_PASSWORD from `global.postgresqlSecretName`.
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "secret")
    rendered = render_instance(values())
    (tmp_path / "dagster.yaml").write_text(yaml.safe_dump(rendered), encoding="utf-8")
    dagster_instance_config(str(tmp_path))
    for key, storage_class in (
        ("run_storage", PostgresRunStorage),
        ("event_log_storage", PostgresEventLogStorage),
        ("schedule_storage", PostgresScheduleStorage),
    ):
        entry = rendered[key]
        assert class_from_code_pointer(entry["module"], entry["class"]) is storage_class
        processed = process_config(storage_class.config_type(), entry["config"])
        assert processed.success, (key, processed.errors)
    for key, configurable in (("run_launcher", K8sRunLauncher), ("run_coordinator", ImportTaggingRunCoordinator)):
        entry = rendered[key]
        assert class_from_code_pointer(entry["module"], entry["class"]) is configurable
        processed = process_config(configurable.config_type(), entry["config"])
        assert processed.success, (key, processed.errors)


def test_the_chart_renders_the_production_instance():
    """values.yaml and dagster.yaml are one instance: the same launcher, limits, queue, monitoring, logs and storage."""
    rendered, production = render_instance(values()), production_instance()
    same = ("concurrency", "run_coordinator", "run_monitoring", "run_retries", "sensors", "python_logs", "telemetry")
    for key in same:
        assert rendered[key] == production[key], key
    assert rendered["compute_logs"]["class"] == production["compute_logs"]["class"]
    # The embedded default's queue and log level: the project's queue, which holds a run of places launched by hand or
    # by a backfill under the import limit, drained as often by as many workers; runs' console logs at INFO.
    local = yaml.safe_load(files("nakodo_dagster").joinpath("data", "dagster.yaml").read_text(encoding="utf-8"))
    assert rendered["run_coordinator"] == local["run_coordinator"]
    assert rendered["python_logs"] == local["python_logs"]

    def launcher_config(instance):
        processed = process_config(K8sRunLauncher.config_type(), instance["run_launcher"]["config"])
        assert processed.success, processed.errors
        return processed.value

    chart, plain = launcher_config(rendered), launcher_config(production)
    # The one difference: the chart writes the storage's host, user, database and port into the instance, so a run
    # pod needs only the password; dagster.yaml names them by variables, which its launcher passes on to run pods.
    storage_variables = sorted(set(plain["env_vars"]) - set(chart.get("env_vars", [])))
    assert storage_variables == ["DAGSTER_PG_DB", "DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME"]
    assert {**chart, "env_vars": plain["env_vars"]} == plain

    chart_db = rendered["run_storage"]["config"]["postgres_db"]
    plain_db = production["storage"]["postgres"]["postgres_db"]
    assert chart_db["password"] == plain_db["password"] == {"env": "DAGSTER_PG_PASSWORD"}
    assert chart_db["scheme"] == plain_db["scheme"] == "postgresql+psycopg2"


def test_imports_are_limited_to_two_at_a_time_by_run_tag_and_by_pool():
    concurrency = values()["concurrency"]
    assert concurrency["enabled"]
    assert concurrency["pools"]["defaultLimit"] == 2
    assert {"key": tags.KIND, "value": tags.IMPORT_KIND, "limit": 2} in concurrency["runs"]["tagConcurrencyLimits"]
    # With `concurrency` on, a limit also given to the run coordinator makes Dagster refuse the instance.
    coordinator = values()["dagsterDaemon"]["runCoordinator"]
    assert coordinator["type"] == "CustomRunCoordinator"
    custom = coordinator["config"]["customRunCoordinator"]["config"]
    assert not {"max_concurrent_runs", "tag_concurrency_limits"} & set(custom)


@pytest.fixture
def chart_job(monkeypatch) -> tuple[str, dict]:
    """The Job an import run gets in the chart's deployment: the launcher the chart renders, and the container
    context the chart gives the code location (`includeConfigInLaunchedRuns`)."""
    deployment = user_deployment()
    context = render_code_location_container_context(values(), deployment)
    # What the code server would hand on: it must pass dagster-k8s's container-context schema.
    K8sContainerContext.create_from_config(context)
    launcher = render_instance(values())["run_launcher"]["config"]
    return run_job(launcher, image_name(deployment["image"]), context, monkeypatch)


def test_a_run_in_the_chart_deployment_gets_the_code_servers_image_variables_and_index(chart_job):
    namespace, job = chart_job
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    deployment = user_deployment()
    objects = manifests()
    assert namespace == "nakodo"
    assert container["image"] == image_name(deployment["image"])
    env_from = [(s["config_map_ref"] or s["secret_ref"])["name"] for s in container["env_from"]]
    assert {"nakodo-env", "nakodo-secrets"} <= set(env_from)
    assert ("ConfigMap", "nakodo-env") in objects
    # The launcher and the code location name the same volume: it is mounted once, where NAKODO_OVERTURE_INDEX says.
    [mount] = container["volume_mounts"]
    assert mount["mount_path"] == objects["ConfigMap", "nakodo-env"]["data"]["NAKODO_OVERTURE_INDEX"]
    [volume] = pod["volumes"]
    assert ("PersistentVolumeClaim", volume["persistent_volume_claim"]["claim_name"]) in objects
    # The run pod's own resources (DuckDB's), not the code server's.
    resources = k8s_run_launcher_values()["resources"]
    assert (container["resources"]["requests"], container["resources"]["limits"]) == (
        resources["requests"],
        resources["limits"],
    )
    security = pod["security_context"]
    assert security["run_as_non_root"]
    assert security["run_as_user"] == security["fs_group"] == deployment["podSecurityContext"]["runAsUser"]
    env = {e["name"]: e for e in container["env"]}
    assert (
        env["DAGSTER_PG_PASSWORD"]["value_from"]["secret_key_ref"]["name"] == values()["global"]["postgresqlSecretName"]
    )


def test_the_user_deployment_serves_the_code_location():
    deployment = user_deployment()
    # A Kubernetes name (DNS-1035 label): the chart names the Deployment and the Service after it.
    assert re.fullmatch(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?", deployment["name"])
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert deployment["codeServerArgs"] == ["-m", pyproject["tool"]["dagster"]["module_name"]]
    assert "dagsterApiGrpcArgs" not in deployment, "the chart would run `dagster api grpc` instead"
    assert deployment["includeConfigInLaunchedRuns"]["enabled"]
    assert isinstance(deployment["image"]["tag"], str) and deployment["image"]["tag"] != "latest"
    assert "resources" not in deployment, "the chart would hand the code server's resources to every run"
    chart = values()
    assert chart["dagster-user-deployments"]["enabled"] and chart["dagster-user-deployments"]["enableSubchart"]
    assert chart["runLauncher"]["type"] == "K8sRunLauncher"


def test_the_webserver_and_the_daemon_run_the_code_servers_image():
    """The run queue is the project's class and runs where a run is submitted: the webserver (a launch from the UI)
    and the daemon (the sensors' runs) must import it, so they run the image that holds the package."""
    chart, deployment = values(), user_deployment()
    assert chart["dagsterWebserver"]["image"] == chart["dagsterDaemon"]["image"] == deployment["image"]
    assert render_instance(chart)["run_coordinator"]["module"] == ImportTaggingRunCoordinator.__module__
    # The chart runs `dagster-webserver -p <service.port>`; the image's user is not root, so the port must be one it
    # may bind, and the readiness probe must ask that port.
    webserver = chart["dagsterWebserver"]
    assert 1024 <= webserver["service"]["port"] <= 65535
    assert webserver["readinessProbe"]["httpGet"]["port"] == webserver["service"]["port"]
    assert deployment["podSecurityContext"]["runAsUser"] != 0


def test_dagsters_storage_is_an_external_postgres_with_a_secret_made_by_hand():
    chart = values()
    postgresql = chart["postgresql"]
    assert postgresql["enabled"] is False, "no bundled PostgreSQL"
    assert postgresql["postgresqlHost"]
    assert "postgresqlPassword" not in postgresql, "no password in this file"
    assert chart["generatePostgresqlPasswordSecret"] is False
    assert chart["global"]["postgresqlSecretName"]
    assert chart["telemetry"]["enabled"] is False
