"""deploy/production/dagster.yaml, judged by Dagster's own schemas: the instance schema (the same function a Dagster
process loads DAGSTER_HOME/dagster.yaml with), dagster-postgres's storage config, dagster-k8s's K8sRunLauncher config,
and the Kubernetes Job that launcher builds for a run."""

from __future__ import annotations

import shutil
from importlib.resources import files

import dagster as dg
import pytest
import yaml
from dagster_k8s import K8sRunLauncher
from dagster_postgres import DagsterPostgresStorage
from deploy_helpers import (
    INSTANCE,
    MANIFESTS,
    env_names,
    manifests,
    production_instance,
    run_job,
    user_deployment,
)

from nakodo_dagster import tags
from nakodo_dagster.coordinator import ImportTaggingRunCoordinator
from nakodo_dagster.dagster_internals import class_from_code_pointer, dagster_instance_config, process_config
from nakodo_dagster.resources import configured_resources
from nakodo_dagster.settings import DEFAULTS

STORAGE_ENV = {
    "DAGSTER_PG_HOST": "dagster-postgres.nakodo.svc.cluster.local",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_USERNAME": "dagster",
    "DAGSTER_PG_PASSWORD": "secret",
    "DAGSTER_PG_DB": "dagster",
}


def nakodo_variables() -> set[str]:
    """The environment variables the code location's resources read when they are set (their ``EnvVar`` fields)."""
    with pytest.MonkeyPatch.context() as patch:
        for name in DEFAULTS:
            patch.setenv(name, "1")
        resources = configured_resources()
    return {
        name
        for resource in resources.values()
        for field in type(resource).model_fields
        if (name := getattr(getattr(resource, field), "env_var_name", None))
    }


def test_the_production_instance_passes_dagsters_instance_schema(tmp_path):
    shutil.copy(INSTANCE, tmp_path / "dagster.yaml")
    # What `DagsterInstance.get()` does with DAGSTER_HOME: the instance schema, and the concurrency rules (pools and
    # run limits in `concurrency`, none of them also in `run_queue`).
    config, custom_class = dagster_instance_config(str(tmp_path))
    assert custom_class is None
    assert set(config) >= {"storage", "run_launcher", "run_coordinator", "concurrency", "run_monitoring", "telemetry"}
    assert config["telemetry"] == {"enabled": False}


def test_the_storage_is_postgres_named_by_environment_variables(monkeypatch):
    storage = production_instance()["storage"]
    assert set(storage) == {"postgres"}
    assert env_names(storage) == set(STORAGE_ENV)
    for name, value in STORAGE_ENV.items():
        monkeypatch.setenv(name, value)
    # dagster-postgres's own schema resolves the variables: a port that is not a number, or a variable left unset,
    # fails here as it would in the daemon.
    processed = process_config(DagsterPostgresStorage.config_type(), storage["postgres"])
    assert processed.success, processed.errors
    db = processed.value["postgres_db"]
    assert (db["hostname"], db["port"], db["username"], db["db_name"]) == (
        "dagster-postgres.nakodo.svc.cluster.local",
        5432,
        "dagster",
        "dagster",
    )
    # SQLAlchemy 2.1 would pick psycopg (3), which the image does not have.
    assert db["scheme"] == "postgresql+psycopg2"
    monkeypatch.delenv("DAGSTER_PG_HOST")
    assert not process_config(DagsterPostgresStorage.config_type(), storage["postgres"]).success


def test_the_run_launcher_is_dagster_k8s_with_a_valid_config():
    launcher = production_instance()["run_launcher"]
    assert class_from_code_pointer(launcher["module"], launcher["class"]) is K8sRunLauncher
    processed = process_config(K8sRunLauncher.config_type(), launcher["config"])
    assert processed.success, processed.errors


def test_the_production_instance_keeps_the_local_limits():
    """Two imports at a time, by hand or not, the queue drained every second by two workers, dead runs failed, runs'
    console logs at INFO: as locally."""
    # The embedded default's instance, shipped in the package (`nakodo sync` and `make run` use it).
    local = yaml.safe_load(files("nakodo_dagster").joinpath("data", "dagster.yaml").read_text(encoding="utf-8"))
    production = production_instance()
    # What a Kubernetes cluster alone can run is set aside; the rest is loaded into real instances and compared as
    # Dagster reads it.
    settings = {k: v for k, v in production.items() if k not in ("storage", "run_launcher", "compute_logs")}
    with dg.instance_for_test(overrides=settings) as prod, dg.instance_for_test(overrides=local) as dev:
        config = prod.get_concurrency_config()
        assert config.pool_config.default_pool_limit == 2
        assert {
            "key": tags.KIND,
            "value": tags.IMPORT_KIND,
            "limit": 2,
        } in config.run_queue_config.tag_concurrency_limits
        # The project's queue, which tags a run of places launched by hand or by a backfill as an import.
        for instance in (prod, dev):
            assert type(instance.run_coordinator) is ImportTaggingRunCoordinator
        assert config == dev.get_concurrency_config()
        for attribute in ("dequeue_interval_seconds", "dequeue_use_threads", "dequeue_num_workers"):
            assert getattr(prod.run_coordinator, attribute) == getattr(dev.run_coordinator, attribute), attribute
        assert prod.python_log_level == dev.python_log_level == "INFO"
        assert prod.run_monitoring_enabled and dev.run_monitoring_enabled
        assert prod.run_monitoring_max_resume_run_attempts == 0, "a dead import is failed, not resumed"
        assert not prod.telemetry_enabled


@pytest.fixture
def production_job(monkeypatch) -> tuple[str, dict]:
    """The Job the production launcher (dagster.yaml alone, no chart) creates for an import run."""
    for name, value in STORAGE_ENV.items():
        monkeypatch.setenv(name, value)
    image = "registry.example.com/nakodo/nakodo-dagster:0.1.0"
    return run_job(production_instance()["run_launcher"]["config"], image, None, monkeypatch)


def test_a_run_pod_gets_what_loading_the_instance_needs(production_job):
    _, job = production_job
    [container] = job["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    # The run pod loads this very instance (mounted from `dagster-instance` at DAGSTER_HOME) and resolves its
    # storage variables itself: every one must be in its environment.
    assert env_names(production_instance()["storage"]) <= set(env)
    assert env["DAGSTER_PG_PASSWORD"]["value_from"]["secret_key_ref"]["name"] == "dagster-postgresql-secret"
    for name in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME", "DAGSTER_PG_DB"):
        assert env[name]["value"] == STORAGE_ENV[name], "passed on from the daemon's environment"
    assert env["DAGSTER_HOME"]["value"] == production_instance()["run_launcher"]["config"]["dagster_home"]


def test_a_run_pod_reads_the_nakodo_variables_and_the_shared_index(production_job):
    namespace, job = production_job
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    objects = manifests()
    config_map = objects["ConfigMap", "nakodo-env"]
    sources = {(s["config_map_ref"] or s["secret_ref"])["name"] for s in container["env_from"]}
    assert sources == {"nakodo-env", "nakodo-secrets"}
    # NAKODO_DATABASE holds a password: it is the Secret's, made by hand as nakodo.yaml's header says.
    secret_keys = {"NAKODO_DATABASE"}
    assert "create secret generic nakodo-secrets --from-literal=NAKODO_DATABASE=" in " ".join(
        MANIFESTS.read_text(encoding="utf-8").replace("\\\n#", " ").split()
    )
    assert nakodo_variables() <= set(config_map["data"]) | secret_keys
    assert nakodo_variables() >= {"NAKODO_DATABASE", "NAKODO_OVERTURE_ROOT", "NAKODO_OVERTURE_RELEASE"}
    # The release indexes: the ConfigMap's NAKODO_OVERTURE_INDEX is where the shared claim is mounted.
    [mount] = container["volume_mounts"]
    assert mount["mount_path"] == config_map["data"]["NAKODO_OVERTURE_INDEX"]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    claim = objects["PersistentVolumeClaim", volume["persistent_volume_claim"]["claim_name"]]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"], "mounted by many pods on many nodes at once"
    assert namespace == config_map["metadata"]["namespace"] == claim["metadata"]["namespace"]
    # The image's user, allowed to write the volume.
    security = pod["security_context"]
    assert security["run_as_non_root"]
    assert security["fs_group"] == security["run_as_user"] == user_deployment()["podSecurityContext"]["runAsUser"]
    assert container["image"] == "registry.example.com/nakodo/nakodo-dagster:0.1.0"
