"""deploy/production/Dockerfile and the chart agree: the image installs the package as the lock pins it, without the
development tools, and serves, on the port and as the user values.yaml names, the command the chart runs; it holds
what the chart's webserver and daemon run on it too.

No Docker daemon is here, so the image is not built: the Dockerfile is parsed (comments dropped, continued lines
joined, CMD read as Docker reads an exec-form array). The end-to-end test (test_deploy_topology.py) starts the code
server with this CMD."""

from __future__ import annotations

import re
import tomllib
from importlib.metadata import entry_points, packages_distributions

from deploy_helpers import ROOT, instructions, k8s_run_launcher_values, production_instance, user_deployment

PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
LOCK = {
    re.split(r"==", line)[0].lower().replace("_", "-"): line.split("==")[1]
    for line in (ROOT / "requirements.lock").read_text(encoding="utf-8").splitlines()
    if "==" in line
}


def chart_command() -> list[str]:
    """What the chart's user deployment runs (`args`, with the image's own entrypoint, which must be none)."""
    deployment = user_deployment()
    return [
        "dagster",
        "code-server",
        "start",
        "-h",
        "0.0.0.0",
        "-p",
        str(deployment["port"]),
        *deployment["codeServerArgs"],
    ]


def pip_installs() -> list[list[str]]:
    """The argument lists of every `pip install` in a RUN."""
    found = []
    for run in instructions("RUN"):
        for command in re.split(r"&&|;", run.argument):
            words = command.split()
            if "pip" in words and "install" in words:
                found.append(words[words.index("install") + 1 :])
    return found


def distribution(name: str) -> str:
    """A distribution's name as pip compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_by_the_image() -> set[str]:
    """The distributions the image's `pip install` asks for by name: the package, its dependencies (pyproject's), and
    what the install line names besides it."""
    [install] = pip_installs()
    lock = install[install.index("-c") + 1]
    named = [w for w in install if not w.startswith("-") and w != lock and not w.startswith("/")]
    dependencies = [re.split(r"[\s=<>!~\[;]", d, maxsplit=1)[0] for d in PYPROJECT["project"]["dependencies"]]
    return {distribution(d) for d in [PYPROJECT["project"]["name"], *dependencies, *named]}


def test_the_image_runs_what_the_chart_runs():
    [cmd] = instructions("CMD")
    assert cmd.exec_form() == chart_command()
    # The chart sets `args`: an ENTRYPOINT would be prepended to them.
    assert not list(instructions("ENTRYPOINT"))


def test_the_image_serves_the_port_the_chart_connects_to():
    [expose] = instructions("EXPOSE")
    assert expose.words() == [str(user_deployment()["port"])]


def test_the_code_server_loads_the_projects_code_location():
    [cmd] = instructions("CMD")
    words = cmd.exec_form()
    assert words[words.index("-m") + 1] == PYPROJECT["tool"]["dagster"]["module_name"]


def test_the_image_runs_as_the_user_the_pods_expect():
    users = list(instructions("USER"))
    assert users, "no USER: the image would run as root"
    user, _, group = users[-1].argument.partition(":")
    assert user.isdigit() and int(user) != 0, "a numeric user, so runAsNonRoot can check it"
    security = user_deployment()["podSecurityContext"]
    assert security["runAsNonRoot"]
    assert (int(user), int(group or user)) == (security["runAsUser"], security["runAsGroup"])
    # Run pods (started with this image by the launcher) run as the same user and can write the index volume.
    assert k8s_run_launcher_values()["runK8sConfig"]["podSpecConfig"]["securityContext"] == security


def test_the_image_installs_the_package_pinned_by_the_lock_without_dev_tools():
    [base] = instructions("FROM")
    minimum = PYPROJECT["project"]["requires-python"].removeprefix(">=")
    python = re.fullmatch(r"python:(\d+\.\d+)-slim(?:-\w+)?", base.argument)
    assert python, base.argument
    assert tuple(map(int, python[1].split("."))) >= tuple(map(int, minimum.split(".")))

    copies = [i.words() for i in instructions("COPY")]
    copied = {source: dest for *sources, dest in copies for source in sources}
    assert {"requirements.lock", "pyproject.toml", "nakodo_dagster"} <= set(copied)
    [install] = pip_installs()
    # The lock as constraints (it also pins the dev tools, which are not installed), the package itself...
    lock = install[install.index("-c") + 1]
    assert lock == copied["requirements.lock"].rstrip("/") + "/requirements.lock"
    package = [w for w in install if not w.startswith("-") and w != lock]
    assert copied["pyproject.toml"].rstrip("/") in package, "the package, from the copied project"
    assert not any("[" in w for w in install), "no extras: `[dev]` would bring pytest, ruff, moto"
    assert "-e" not in install and "--editable" not in install
    # ...and only what the daemon and run pods need besides: dagster-k8s (the instance's K8sRunLauncher), at the lock's
    # pin.
    extras = [w for w in package if w != copied["pyproject.toml"].rstrip("/")]
    assert extras == ["dagster-k8s"]
    assert LOCK["dagster-k8s"] == LOCK["dagster-postgres"], "the same Dagster release"
    # The DuckDB extension comes from pip with the package, not downloaded at run time.
    assert any(d.startswith("duckdb-extension-httpfs") for d in PYPROJECT["project"]["dependencies"])


def test_the_image_holds_what_the_webserver_and_the_daemon_run():
    """The chart runs its webserver and daemon on this image (values.yaml): their commands, and every class the
    instance makes them load, come with what the image installs."""
    installed = installed_by_the_image()
    scripts = {script.name: script.dist.name for script in entry_points(group="console_scripts") if script.dist}
    # `dagster-webserver -h 0.0.0.0 -p <port> -w ...` and `dagster-daemon run -w ...`, as the chart runs them.
    for command in ("dagster-webserver", "dagster-daemon"):
        assert distribution(scripts[command]) in installed, command
    instance = production_instance()
    assert set(instance["storage"]) == {"postgres"}, "dagster-postgres's storage"
    modules = ["dagster_postgres", instance["run_launcher"]["module"], instance["run_coordinator"]["module"]]
    owners = packages_distributions()
    for module in modules:
        assert {distribution(owner) for owner in owners[module.split(".")[0]]} & installed, module
