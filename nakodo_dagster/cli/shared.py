"""What several ``nakodo`` command groups use: how errors are reported, the configured store and Dagster
instance, and the one way a moment is written."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from importlib.resources import files
from pathlib import Path

import click

from nakodo_dagster import settings
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.geocode import GeocoderUnavailable
from nakodo_dagster.store import Store, StoreLocked, open_store


class _ClearErrors:
    """Bad input becomes click's usage error (exit 2, the command's own usage); an unavailable service exit 1."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except InvalidInput as exc:
            raise click.UsageError(str(exc), ctx) from exc
        except (GeocoderUnavailable, StoreLocked) as exc:
            raise click.ClickException(str(exc)) from exc


class NakodoCommand(_ClearErrors, click.Command):
    """A ``nakodo`` command."""


class NakodoGroup(_ClearErrors, click.Group):
    """A ``nakodo`` group: its commands report errors the same way."""

    command_class = NakodoCommand


def open_configured_store() -> Store:
    """The configured store, its schema up to date."""
    store = open_store(settings.value("NAKODO_DATABASE"))
    store.migrate()
    return store


def dagster_home() -> Path:
    """DAGSTER_HOME if set, else data/dagster_home, created with the embedded default's settings on first use."""
    configured = settings.configured("DAGSTER_HOME")
    if configured is not None:
        home = Path(configured).absolute()
        # Empty, it is a value all the same (settings' rule): not a folder, though Path("") would be the working one.
        if not configured or not home.is_dir():
            raise InvalidInput(
                f"DAGSTER_HOME {configured!r} is not a folder: create it, or unset it to use data/dagster_home"
            )
    else:
        home = (settings.DATA / "dagster_home").absolute()
        home.mkdir(parents=True, exist_ok=True)
        instance_file = home / "dagster.yaml"
        if not instance_file.is_symlink() and not instance_file.exists():
            # The embedded default's instance, the one `make run` links: two imports at a time, telemetry off.
            instance_file.write_text(
                files("nakodo_dagster").joinpath("data", "dagster.yaml").read_text("utf-8"), "utf-8"
            )
    # Dagster wants an absolute DAGSTER_HOME; the import and search runs in this process read it.
    os.environ["DAGSTER_HOME"] = str(home)
    return home


# Written in DAGSTER_HOME once its storage is up to date for a Dagster version: a preparation with the same version
# opens the storage only, as Dagster's upgrade reads every run's event file.
PREPARED_FOR = ".nakodo_prepared_for_dagster"


def prepared_dagster_home() -> Path:
    """dagster_home(), its storage created, or brought up to date after a Dagster upgrade, by this one process.

    Dagster creates an instance's storage when a process first opens it; two processes doing so at once (a webserver
    and a daemon started together on a new SQLite instance) can both stamp its schema, and neither loads it again.
    Run before the processes that share the instance start; preparations run at once wait for each other."""
    import fcntl

    import dagster as dg

    home = dagster_home()
    with (home / ".nakodo_prepare.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with dg.DagsterInstance.get() as instance:
            prepared_for = home / PREPARED_FOR
            if not prepared_for.exists() or prepared_for.read_text("utf-8").strip() != dg.__version__:
                instance.upgrade()
                prepared_for.write_text(dg.__version__, "utf-8")
    return home


# Every date the command line prints is ISO 8601 in UTC: a day alone, or with the time to the minute.
_DAY = "%Y-%m-%d"


def utc_day(moment: datetime) -> str:
    """``2026-11-18``: the day a moment falls on in UTC."""
    return f"{moment.astimezone(UTC):{_DAY}}"


def utc_minute(moment: datetime) -> str:
    """``2026-11-18 09:30 UTC``: a moment in UTC, to the minute."""
    return f"{moment.astimezone(UTC):{_DAY} %H:%M} UTC"
