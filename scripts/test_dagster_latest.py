"""Run the Dagster-level tests on the newest Dagster 1.13, in a scratch virtualenv: is an upgrade safe?

The project and its other dependencies install at their locked versions (requirements.lock); Dagster's own packages
(dagster, dagster-webserver, the 0.29 libraries and what they pull in) at the newest patch of their series that
installs together: each library pins the dagster it was released with, so a dagster published before its libraries
waits for them. Prints, for each Dagster package, the version installed and the newest published, then runs the
tests that exercise Dagster itself: the contract of nakodo_dagster.dagster_internals first, then the Dagster layer,
the deployment's configuration, the definitions and the workspace. Arguments are handed to pytest (`-x`, more
tests). Exits with pytest's status; the virtualenv is removed afterwards.

    python3 scripts/test_dagster_latest.py            # or: make test-dagster-latest
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Dagster releases its core as 1.x and its libraries as 0.(x+16): both series move together.
SERIES = {"1": "1.13", "0": "0.29"}
DAGSTER_LEVEL_TESTS = [
    "tests/test_dagster_internals.py",
    "tests/dagster",
    "tests/deploy",
    "tests/test_defs.py",
    "tests/test_workspace.py",
]
_DAGSTER_PIN = re.compile(r"^(dagster(?:-[a-z0-9-]+)?)==(\d+)\.\d+\.\d+$", re.IGNORECASE)


def unpinned(requirement: str) -> str:
    """A Dagster package's exact pin widened to its series (`dagster==1.13.27` -> `dagster>=1.13,<1.14`); any other
    requirement as it is."""
    found = _DAGSTER_PIN.match(requirement.strip())
    if not found:
        return requirement
    name, major = found.groups()
    series = SERIES[major]
    minor = int(series.split(".")[1])
    return f"{name}>={series},<{major}.{minor + 1}"


def project_requirements() -> list[str]:
    """The project's dependencies and its dev extra's, as pyproject.toml names them."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *project["optional-dependencies"]["dev"]]


def newest_published(python: Path, package: str) -> str:
    """The newest version of ``package`` the package index has in its series, or "?" if it cannot say."""
    listed = subprocess.run(
        [python, "-m", "pip", "index", "versions", package], capture_output=True, text=True, check=False
    ).stdout
    found = re.search(r"Available versions: (.+)", listed)
    versions = found.group(1).split(", ") if found else []
    return next((v for v in versions if any(v.startswith(f"{s}.") for s in SERIES.values())), "?")


def dagster_packages(python: Path) -> dict[str, str]:
    """The Dagster packages installed in the virtualenv of ``python``, with their versions."""
    frozen = subprocess.run([python, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    return dict(
        line.split("==", 1) for line in frozen.splitlines() if line.lower().startswith("dagster") and "==" in line
    )


def main(pytest_arguments: list[str]) -> int:
    with tempfile.TemporaryDirectory(prefix="nakodo-dagster-latest-") as scratch:
        venv = Path(scratch) / "venv"
        python = venv / "bin" / "python"
        # The lock without Dagster's packages: everything else stays at the versions the project is tested with.
        constraints = Path(scratch) / "constraints.txt"
        locked = (ROOT / "requirements.lock").read_text().splitlines()
        constraints.write_text("".join(f"{line}\n" for line in locked if not _DAGSTER_PIN.match(line)))
        subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--upgrade", "pip"], check=True)
        requirements = [unpinned(requirement) for requirement in project_requirements()]
        print(f"Installing into {venv}: {', '.join(r for r in requirements if r.startswith('dagster'))}", flush=True)
        subprocess.run([python, "-m", "pip", "install", "--quiet", "-c", constraints, *requirements], check=True)
        # The project itself, as `make` installs it (editable: the tests run against this checkout).
        subprocess.run([python, "-m", "pip", "install", "--quiet", "--no-deps", "-e", ROOT], check=True)

        print(f"{'package':<26}{'installed':<12}newest published")
        behind = []
        for package, version in sorted(dagster_packages(python).items()):
            newest = newest_published(python, package)
            print(f"{package:<26}{version:<12}{newest}", flush=True)
            if newest not in (version, "?"):
                behind.append(f"{package} {newest}")
        if behind:
            print(
                "Published, but not installable with the project's other Dagster packages yet (each library pins the "
                f"dagster it was released with): {', '.join(behind)}."
            )

        tests = [python, "-m", "pytest", "-p", "no:cacheprovider", *DAGSTER_LEVEL_TESTS, *pytest_arguments]
        return subprocess.run(tests, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
