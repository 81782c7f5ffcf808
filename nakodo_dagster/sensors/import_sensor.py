"""Asks for exactly the imports the active campaigns miss: one run per 4 x 4 block or country."""

import contextlib
import gc
import logging
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import dagster as dg

from nakodo_dagster.assets.places import IMPORT_KEY_TAG, import_places
from nakodo_dagster.partitions import AREA, CATEGORY, new_partitions_request, places_partition
from nakodo_dagster.placement import ImportRun, PlaceImport, areas_for, campaigns_needs, marks_to_confirm
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import Campaign, Store

# A tick storm must not queue the same work twice while it runs; a failed payload may go again after this.
SAME_WORK_HOURS = 2
STAMP_TAG = "nakodo/stamp"
PARTITION_TAG = "dagster/partition"
_UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


# A tag filter becomes one SQL IN list, and SQLite caps the parameters of a statement.
_KEYS_PER_QUERY = 500


def _launched_recently(instance: dg.DagsterInstance, runs: list[ImportRun], now: datetime) -> set[str]:
    """The payload keys among these runs that some run carried within SAME_WORK_HOURS."""
    keys = sorted({run.key for run in runs})
    since = now - timedelta(hours=SAME_WORK_HOURS)
    launched: set[str] = set()
    for start in range(0, len(keys), _KEYS_PER_QUERY):
        records = instance.get_run_records(
            filters=dg.RunsFilter(tags={IMPORT_KEY_TAG: keys[start : start + _KEYS_PER_QUERY]}, created_after=since)
        )
        launched.update(record.dagster_run.tags[IMPORT_KEY_TAG] for record in records)
    return launched


def _stamp_tag(stamp: datetime) -> str:
    return stamp.astimezone(UTC).isoformat()


def _has_run(instance: dg.DagsterInstance, stamp: datetime, pairs: list[tuple[str, str]]) -> bool:
    if instance.get_run_records(filters=dg.RunsFilter(tags={STAMP_TAG: _stamp_tag(stamp)}), limit=1):
        return True
    # An analyst's re-materialisation marks its pair from inside its own run, which carries the partition, no stamp.
    return any(
        instance.get_run_records(
            filters=dg.RunsFilter(tags={PARTITION_TAG: str(places_partition(*pair))}, statuses=_UNFINISHED), limit=1
        )
        for pair in pairs
    )


def _take_back_unlaunched(
    instance: dg.DagsterInstance, store: Store, rows: list[PlaceImport], now: datetime, log: logging.Logger
) -> int:
    """Take back the marks whose run never reached Dagster, so campaigns ask again instead of waiting six hours."""
    taken = 0
    for stamp, pairs in marks_to_confirm(rows, now).items():
        if not _has_run(instance, stamp, pairs):
            taken += store.take_back(pairs, stamp)
    if taken:
        log.warning(f"Took back {taken} marks whose import run was never launched; they are asked for again.")
    return taken


class StepClock:
    """How long each step of a tick took, for its log line: a data engineer sees where a slow tick goes."""

    def __init__(self) -> None:
        self._started = self._last = time.perf_counter()
        self.steps: dict[str, float] = {}

    def lap(self, step: str) -> None:
        """Charge the time since the last lap to ``step``."""
        now = time.perf_counter()
        self.steps[step] = self.steps.get(step, 0.0) + now - self._last
        self._last = now

    @property
    def seconds(self) -> float:
        return self._last - self._started

    def __str__(self) -> str:
        steps = ", ".join(f"{step} {seconds:.2f} s" for step, seconds in self.steps.items())
        return f"{self.seconds:.2f} s ({steps})"


def _run_request(run: ImportRun, stamp: datetime) -> dg.RunRequest:
    west, south, east, north = run.bbox
    return dg.RunRequest(
        run_key=f"{run.key}@{stamp.isoformat()}",
        run_config={"ops": {"import_block": {"config": run.payload()}}},
        tags={
            IMPORT_KEY_TAG: run.key,
            STAMP_TAG: _stamp_tag(stamp),
            "nakodo/box": f"{west},{south},{east},{north}",
            "nakodo/area": run.areas[0] if run.country_code else f"{len(run.areas)} cells",
            "nakodo/categories": ",".join(run.categories)[:200],
        },
    )


def _new_partitions(instance: dg.DagsterInstance, runs: list[ImportRun]) -> list[dg.AddDynamicPartitionsRequest]:
    areas = sorted({area for run in runs for area in run.areas})
    categories = sorted({category for run in runs for category in run.categories})
    return new_partitions_request(instance, AREA, areas) + new_partitions_request(instance, CATEGORY, categories)


@contextlib.contextmanager
def _cyclic_gc_paused() -> Iterator[None]:
    # A big tick allocates hundreds of thousands of small containers, none of them in a cycle: with the cyclic
    # collector on, its passes over the growing heap took most of a 1,000-campaign tick. Reference counting still
    # frees everything the tick drops.
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


@_cyclic_gc_paused()
def request_import_runs(
    instance: dg.DagsterInstance,
    store: Store,
    overture: OvertureResource,
    campaigns: list[Campaign],
    now: datetime,
    log: logging.Logger,
    clock: StepClock | None = None,
) -> dg.SensorResult | dg.SkipReason:
    """Reserve what the campaigns miss and ask for one run per block or country; on failure take it back.

    Marks of an earlier tick whose runs never reached the instance are taken back first and asked for again.
    ``clock``, if given, is charged with each step (the tick's log line names them either way).
    """
    if not campaigns:
        return dg.SkipReason("No active campaign.")
    clock = clock or StepClock()
    targetings = [c.targeting for c in campaigns]
    categories = sorted({category for t in targetings for category in t.categories})
    areas_of = [areas_for(targeting) for targeting in targetings]
    every_area = {key for campaign_areas in areas_of for key in campaign_areas}
    clock.lap("areas")
    rows = store.import_rows(every_area, categories)
    clock.lap("freshness")
    if _take_back_unlaunched(instance, store, rows, now, log):
        rows = store.import_rows(every_area, categories)
    clock.lap("orphans")
    areas, needs = campaigns_needs(targetings, rows, now, areas_of)
    clock.lap("needs")
    if overture.off_reason:
        message = f"{len(needs.missing)} areas of business listings not loaded: {overture.off_reason}."
        log.warning(message)
        return dg.SkipReason(message)
    if not needs.missing:
        return dg.SkipReason(f"Nothing missing; {len(needs.coming)} areas have an import on its way; tick {clock}.")
    # A release that cannot be found fails the tick before anything is reserved, not every run for 7 days.
    release = overture.current_release()
    clock.lap("release")
    reservation = store.reserve_runs(needs.missing, areas, now)
    runs, stamp = reservation.runs, reservation.stamp
    clock.lap("reserve")
    try:
        recent = _launched_recently(instance, runs, now)
        launch = [run for run in runs if run.key not in recent]
        skipped = [run for run in runs if run.key in recent]
        # The same payload already ran within two hours: its marks are not ours to keep.
        store.take_back([pair for run in skipped for pair in run.pairs], stamp)
        clock.lap("same work")
        result = dg.SensorResult(
            run_requests=[_run_request(run, stamp) for run in launch],
            dynamic_partitions_requests=_new_partitions(instance, launch),
        )
        clock.lap("requests")
    except Exception:
        # Not asked for after all: the marks go, so the next tick asks again.
        store.take_back([pair for run in runs for pair in run.pairs], stamp)
        raise
    log.info(
        f"Reserved {sum(len(r.pairs) for r in runs)} pairs in {len(launch)} runs of release {release} "
        f"({len(skipped)} identical runs launched within {SAME_WORK_HOURS} h were skipped) in {clock}."
    )
    return result


@dg.sensor(
    job=import_places,
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Reserves the (area, category) pairs active campaigns miss and launches one run per block.",
)
def import_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, overture: OvertureResource
) -> dg.SensorResult | dg.SkipReason:
    return request_import_runs(
        context.instance,
        store.store,
        overture,
        store.store.campaigns(active_only=True),
        datetime.now(UTC),
        context.log,
    )
