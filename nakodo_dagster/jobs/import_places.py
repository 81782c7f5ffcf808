"""The import_places job: one run reads one 4 x 4 block of cells (or one country) and replaces its pairs."""

from collections.abc import Mapping
from typing import Any

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.imports.events import (
    IMPORT_POOL,
    held_warning,
    import_events,
    releases_observation,
    replaced_marks_warning,
    tag_held,
)
from nakodo_dagster.imports.failure import run_overrun, run_started
from nakodo_dagster.imports.run import import_or_release_marks, run_stamp
from nakodo_dagster.jobs import CONSOLE_LOGGER_CONFIG, passing_faults_retried, retries_left
from nakodo_dagster.pacing import IMPORT_MAX_RUNTIME_MINUTES
from nakodo_dagster.placement import ImportRun
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.words import plural


class ImportRunConfig(dg.Config):
    """The canonical payload of one import run, as the import sensor built it."""

    areas: list[str]
    categories: list[str]
    bbox: list[float]
    country_code: str | None = None
    pairs: list[list[str]]


@dg.op(pool=IMPORT_POOL)
def import_block(
    context: dg.OpExecutionContext, config: ImportRunConfig, store: StoreResource, overture: OvertureResource
) -> None:
    """Read one 4 x 4 block (or one country) from the release and replace the pairs it reserved."""
    run = ImportRun.from_payload(config.model_dump())
    context.log.info(f"Reading {plural(len(run.pairs), 'pair')} in box {run.bbox}")
    with passing_faults_retried(context):
        outcome = import_or_release_marks(
            run,
            store.store,
            overture,
            run_stamp(context.run),
            overrun=run_overrun(context),
            read_retried=retries_left(context),
            read_began=run_started(context),
        )
    landed = [p for p in outcome.pairs if (p.area, p.category) not in outcome.held | outcome.carried]
    context.log.info(
        f"Wrote {plural(sum(p.rows for p in landed), 'place')} from release {outcome.release} "
        f"in {outcome.seconds:.1f} s"
        + (f"; held {plural(len(outcome.held), 'pair')} at the drift gate" if outcome.held else "")
        + (
            f"; carried {plural(len(outcome.carried), 'pair')} over unread, as its changelog lists no change in "
            "their cells"
            if outcome.carried
            else ""
        )
    )
    for warning in (replaced_marks_warning(outcome), held_warning(outcome)):
        if warning:
            context.log.warning(warning)
    tag_held(context, [outcome])
    for event in import_events(outcome):
        context.log_event(event)
    context.log_event(releases_observation(store.store.release_pairs()))


@dg.job(
    tags={tags.KIND: tags.IMPORT_KIND, tags.MAX_RUNTIME: str(IMPORT_MAX_RUNTIME_MINUTES * 60)},
    executor_def=dg.in_process_executor,
    description="Import one block of cells or one country into places.",
)
def import_places() -> None:
    import_block()


def import_run_config(run: ImportRun) -> dg.RunConfig:
    """The run config of ``import_places`` for one import run."""
    return dg.RunConfig(ops={import_block.name: ImportRunConfig(**run.payload())}, loggers=CONSOLE_LOGGER_CONFIG)


def import_payload(run_config: Mapping[str, Any]) -> dict[str, Any]:
    """The import run's payload in a stored run config of ``import_places`` (raises KeyError for any other)."""
    return run_config["ops"][import_block.name]["config"]
