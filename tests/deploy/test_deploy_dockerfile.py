"""deploy/production/Dockerfile and the chart agree: the image installs the package as the lock pins it, without the
development tools, and serves, on the port and as the user values.yaml names, the command the chart runs.

No Docker daemon is here, so the image is not built: the Dockerfile is parsed (comments dropped, continued lines
joined, CMD read as Docker reads an exec-form array). The end-to-end test (test_deploy_topology.py) starts the code
server with this CMD."""

from __future__ import annotations

import re
import tomllib

from deploy_helpers import ROOT, instructions, k8s_run_launcher_values, user_deployment

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
    # ...and only what run pods need besides: dagster-k8s (to load the instance's K8sRunLauncher), at the lock's pin.
    extras = [w for w in package if w != copied["pyproject.toml"].rstrip("/")]
    assert extras == ["dagster-k8s"]
    assert LOCK["dagster-k8s"] == LOCK["dagster-postgres"], "the same Dagster release"
    # The DuckDB extension comes from pip with the package, not downloaded at run time.
    assert any(d.startswith("duckdb-extension-httpfs") for d in PYPROJECT["project"]["dependencies"])
