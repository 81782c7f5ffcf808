"""Asks for exactly the imports the active campaigns miss: one run per 4 x 4 block or country, as many as the
queue starts within about ten minutes, in fair-share order."""

from __future__ import annotations

import itertools
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.dagster_internals import AUTO_RETRY_RUN_ID_TAG, WILL_RETRY_TAG, retry_daemon_read_up_to
from nakodo_dagster.imports.events import roll_out_observation
from nakodo_dagster.jobs.by_hand import reimport_places
from nakodo_dagster.jobs.import_places import import_places, import_run_config
from nakodo_dagster.overture.faults import first_line
from nakodo_dagster.pacing import BACKLOG_PRIORITY, FIRST_BLOCK_PRIORITY, admitted_runs, import_pace
from nakodo_dagster.partitions import AREA, CATEGORY, new_partitions_request, places_partition
from nakodo_dagster.placement import IMPORT_HOURS, LAUNCH_GRACE_MINUTES, ImportRun, block_key, parse_area_key
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.store import COMMIT_OVERLAP, Reservation, ServedCampaigns, Store
from nakodo_dagster.words import plural

# A tick storm must not queue the same work twice while it runs; a failed payload may go again at once.
SAME_WORK_HOURS = 2
UNFINISHED = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
_FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE]
# How often the root is looked at for a newer release: a listing of an s3:// root costs requests, and a release
# comes monthly.
RELEASE_LOOK_MINUTES = 5
# Finished import runs the pace is judged from: enough for a steady median, few enough to read every tick.
_PACE_WINDOW = 50
# Seconds a tick spends taking back marks whose runs never reached Dagster, the rest left for the next tick: Dagster
# cancels a tick after 60 s, and its cursor does not move. Taken back one stamp and one pair at a time, 80 runs'
# 17,627 pairs took 88.8 s.
TAKE_BACK_SECONDS = 20.0
# A tag filter becomes one SQL IN list, and SQLite caps the parameters of a statement.
_KEYS_PER_QUERY = 500
# Run failures read at once when telling which ones Dagster's retry daemon has read: a page of the event log.
_FAILURES_PER_PAGE = 1000


@dataclass
class ImportCursor:
    """What the import sensor carries from one tick to the next."""

    confirmed: set[str] = field(default_factory=set)
    """Stamps of marks already seen with a run behind them."""
    checked_at: datetime | None = None
    """Every missing pair was found as of this moment (a look's start, less COMMIT_OVERLAP)."""
    waiting: int = 0
    """Runs' worth of missing pairs that look left for the queue."""
    retries_checked_at: datetime | None = None
    """Failed import runs were checked for a retry Dagster never launched up to this moment."""
    release: str | None = None
    """The release the sensor reads, as last looked at: a newer one is announced once."""
    release_looked_at: datetime | None = None
    """When the root was last looked at for a newer release."""

    @classmethod
    def loads(cls, text: str | None) -> ImportCursor:
        if not text:
            return cls()
        state = json.loads(text)
        moments = {
            name: datetime.fromisoformat(state[name]) if state.get(name) else None
            for name in ("checked_at", "retries_checked_at", "release_looked_at")
        }
        return cls(
            set(state.get("confirmed", [])),
            moments["checked_at"],
            state.get("waiting", 0),
            moments["retries_checked_at"],
            state.get("release"),
            moments["release_looked_at"],
        )

    def dumps(self) -> str:
        def moment(value: datetime | None) -> str | None:
            return value.isoformat() if value else None

        return json.dumps(
            {
                "confirmed": sorted(self.confirmed),
                "checked_at": moment(self.checked_at),
                "waiting": self.waiting,
                "retries_checked_at": moment(self.retries_checked_at),
                "release": self.release,
                "release_looked_at": moment(self.release_looked_at),
            }
        )


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


def _import_runs_filter(statuses: list[dg.DagsterRunStatus]) -> dg.RunsFilter:
    return dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}, statuses=statuses)


def _blocking_runs(
    instance: dg.DagsterInstance, store: str, runs: list[ImportRun], release: str, now: datetime
) -> set[str]:
    """The payload keys among these runs that a queued or running run for the same store (``Store.identity``)
    carries, or that succeeded within SAME_WORK_HOURS asked for ``release``. A failed or cancelled run blocks
    nothing: its retry may go at once. Another store's run of the same payload is other work: it writes other rows.
    So is one that moved the pairs to an older release: a roll-out soon after it asks them to move again."""
    keys = sorted({run.key for run in runs})
    since = now - timedelta(hours=SAME_WORK_HOURS)
    blocking: set[str] = set()
    for start, key in itertools.product(range(0, len(keys), _KEYS_PER_QUERY), tags.keys_of(tags.IMPORT_KEY)):
        chunk = {key: keys[start : start + _KEYS_PER_QUERY], tags.STORE: store}
        for runs_filter in (
            dg.RunsFilter(tags=chunk, statuses=UNFINISHED),
            dg.RunsFilter(
                tags={**chunk, tags.RELEASE: release}, statuses=[dg.DagsterRunStatus.SUCCESS], created_after=since
            ),
        ):
            records = instance.get_run_records(runs_filter)
            blocking.update(record.dagster_run.tags[key] for record in records)
    return blocking


def queue_pace(instance: dg.DagsterInstance) -> tuple[float, int]:
    """Import runs an hour the queue gets through (pacing.import_pace) and how many are queued or running.

    A gap between two finishing runs counts only if the later run was already waiting when the earlier one
    finished: an idle queue says nothing about its pace.
    """
    records = instance.get_run_records(_import_runs_filter(_FINISHED), limit=_PACE_WINDOW)
    finished = sorted((r for r in records if r.end_time), key=lambda r: r.end_time)
    gaps = [
        later.end_time - earlier.end_time
        for earlier, later in itertools.pairwise(finished)
        if later.create_timestamp.timestamp() < earlier.end_time
    ]
    return import_pace(gaps), instance.get_runs_count(_import_runs_filter(UNFINISHED))


def _stamps_with_runs(instance: dg.DagsterInstance, stamps: Sequence[str]) -> set[str]:
    """Those of ``stamps`` (tag values) that a run carries: one query per _KEYS_PER_QUERY stamps and key of the tag,
    not one per stamp."""
    found: set[str] = set()
    for start, key in itertools.product(range(0, len(stamps), _KEYS_PER_QUERY), tags.keys_of(tags.STAMP)):
        records = instance.get_run_records(dg.RunsFilter(tags={key: list(stamps[start : start + _KEYS_PER_QUERY])}))
        found.update(record.dagster_run.tags[key] for record in records)
    return found


def _unfinished_partitions(instance: dg.DagsterInstance) -> set[str]:
    """The partition of every queued or running run that names one, in one query: an analyst's re-materialisation
    marks its pair from inside its own run, which may not carry the stamp yet."""
    runs = instance.get_runs(dg.RunsFilter(statuses=UNFINISHED))
    return {run.tags[tags.PARTITION] for run in runs if tags.PARTITION in run.tags}


def release_unsent(
    store: Store, pairs: Sequence[tuple[str, str]], stamp: datetime, why: str, log: logging.Logger
) -> int:
    """Take back marks whose runs were never handed to Dagster, so that the next tick asks again; returns how many.

    If even that fails, the marks are marked failed with why: the campaigns waiting on them count them failed and
    say so now, rather than wait six hours on imports nobody asked for (the seeds rethrow for the same reason, "so
    the campaign's search sees the failure"). If that fails too, the error goes up and fails the tick.
    """
    try:
        return store.take_back(pairs, stamp)
    except Exception as error:
        reason = f"the import sensor could not launch the import ({why}) nor take its mark back ({error})"
        marked = store.mark_failed(pairs, stamp, datetime.now(UTC), reason.splitlines()[0])
        log.error(
            f"{plural(marked, 'pair')} marked failed: {reason}. `nakodo imports status` lists them; "
            "`nakodo imports retry AREA CATEGORY` asks for one again now."
        )
        return 0


def take_back_unlaunched(
    instance: dg.DagsterInstance, store: Store, confirmed: set[str], now: datetime, log: logging.Logger
) -> set[str]:
    """Take back the marks whose run never reached Dagster, so campaigns ask again instead of waiting six hours.

    ``confirmed`` are stamps already seen with a run (the sensor's cursor): each stamp is looked up once, so a
    tick's cost grows with the new stamps, not with the marks on their way. The new stamps are looked up together
    (a few instance queries, however many stamps and pairs), and a tick spends at most TAKE_BACK_SECONDS taking
    back, oldest stamp first, and says what it left for the next. Returns the stamps confirmed now.
    """
    started = time.monotonic()
    awaiting = {tags.stamp_tag(stamp): stamp for stamp in sorted(store.marks_awaiting_run(now))}
    still_confirmed = {key for key in awaiting if key in confirmed}
    new = [key for key in awaiting if key not in confirmed]
    with_runs = _stamps_with_runs(instance, new) if new else set()
    still_confirmed |= with_runs
    unsent = [key for key in new if key not in with_runs]
    partitions = _unfinished_partitions(instance) if unsent else set()
    taken = left = 0
    for number, key in enumerate(unsent):
        if number and time.monotonic() - started > TAKE_BACK_SECONDS:
            left = len(unsent) - number
            break
        pairs = store.marks_stamped(awaiting[key])
        if any(str(places_partition(*pair)) in partitions for pair in pairs):
            still_confirmed.add(key)
        else:
            taken += release_unsent(store, pairs, awaiting[key], "its run never reached Dagster", log)
    if taken:
        log.warning(
            f"{plural(taken, 'import')} could not be launched; {'its area is' if taken == 1 else 'their areas are'} "
            "asked for again at the next tick."
        )
    if left:
        log.warning(
            f"The marks of {plural(left, 'more tick')} whose runs never reached Dagster are taken back at the next "
            f"tick: this one spent its {TAKE_BACK_SECONDS:g} s on the oldest."
        )
    return still_confirmed


def take_back_unretried(
    instance: dg.DagsterInstance, store: Store, since: datetime | None, now: datetime, log: logging.Logger
) -> datetime:
    """Take back the marks of failed import runs Dagster meant to run again and never will, and ask for them again.
    The failure sensor left their marks for the retry, and nothing else would free them before their six hours.

    A run is given up on as soon as Dagster's retry daemon has read its failure and left it without a retry (its
    retry could not be launched: the code location not loaded after a restart, the job renamed; or the daemon read
    the failure before the run's status said failed, see retry_daemon_read_up_to). A failure the daemon has not
    read (the daemon down) is given up on after the launch grace. Looks at the runs that failed (or were given up)
    since ``since``; returns where the next look starts, the launch grace ago."""
    until = now - timedelta(minutes=LAUNCH_GRACE_MINUTES)
    since = since or until - timedelta(hours=IMPORT_HOURS)
    # Read before the runs: the daemon tags a run with its retry before it records having read the failure, so a
    # run read after this holds its retry's tag if the daemon retried it.
    read_up_to = retry_daemon_read_up_to(instance)
    records = instance.get_run_records(
        dg.RunsFilter(tags={tags.KIND: tags.IMPORT_KIND}, statuses=[dg.DagsterRunStatus.FAILURE], updated_after=since)
    )
    # Only runs Dagster decided about: a run it never meant to retry had its marks marked failed.
    unretried = [
        (record, value)
        for record in records
        if WILL_RETRY_TAG in record.dagster_run.tags
        and AUTO_RETRY_RUN_ID_TAG not in record.dagster_run.tags
        and (value := tags.run_tag(record.dagster_run.tags, tags.STAMP)) is not None
    ]
    recent = {record.dagster_run.run_id for record, _ in unretried if record.update_timestamp > until}
    passed_by = failures_read(instance, read_up_to, recent, since) if recent else set()
    for record, value in unretried:
        run = record.dagster_run
        if run.run_id in recent and run.run_id not in passed_by:
            continue
        if any(
            instance.get_runs_count(dg.RunsFilter(tags={key: value}, statuses=UNFINISHED))
            for key in tags.keys_of(tags.STAMP)
        ):
            continue
        stamp = tags.stamp_from_tag(value)
        why = f"run {run.run_id} failed and Dagster did not run it again"
        if taken := release_unsent(store, store.marks_stamped(stamp), stamp, why, log):
            log.warning(f"{why}: {plural(taken, 'pair')} asked for again.")
    return max(since, until)


def failures_read(instance: dg.DagsterInstance, read_up_to: int | None, run_ids: set[str], since: datetime) -> set[str]:
    """Those of ``run_ids`` whose failure, recorded since ``since``, Dagster's retry daemon has read (up to
    ``read_up_to``, the storage id it has read to, None before its first look)."""
    if read_up_to is None:
        return set()
    failures = dg.RunStatusChangeRecordsFilter(
        dg.DagsterEventType.RUN_FAILURE, after_timestamp=since.timestamp(), before_storage_id=read_up_to + 1
    )
    read: set[str] = set()
    cursor = None
    while True:
        result = instance.fetch_run_status_changes(failures, limit=_FAILURES_PER_PAGE, cursor=cursor)
        read |= {record.run_id for record in result.records} & run_ids
        if not result.has_more or read == run_ids:
            return read
        cursor = result.cursor


def announce_release(
    store: Store, overture: OvertureResource, state: ImportCursor, now: datetime, log: logging.Logger
) -> list[dg.AssetObservation]:
    """Say once, when the release the sensor reads changes, how far it has reached among the loaded pairs, when the
    last of them moves at the FRESH_DAYS pace and how to move them now: a log line and an observation on places.
    The root is looked at every RELEASE_LOOK_MINUTES; nothing is said while every loaded pair is on the release
    (a store that holds nothing yet, or a roll-out done)."""
    if overture.off_reason or (
        state.release_looked_at is not None and now - state.release_looked_at < timedelta(minutes=RELEASE_LOOK_MINUTES)
    ):
        return []
    state.release_looked_at = now
    try:
        release = overture.current_release()
    except Exception as error:
        # No release under the root, or the object store failing to list it: the tick's reservation says so, and
        # takes its marks back, if it needs the release. A look that fails is only a look, tried again at the next;
        # raised, it would fail ticks that need nothing from the root.
        log.warning(f"No release to announce: {first_line(error)}")
        return []
    if release == state.release:
        return []
    state.release = release
    roll_out = store.roll_out_status(release, now)
    if roll_out.last_move_at is None:
        return []
    message = f"A newer release is under the root. {roll_out.in_words()}"
    log.info(message)
    return [roll_out_observation(roll_out, message)]


def _run_request(
    run: ImportRun, stamp: datetime, first_block: bool, served: ServedCampaigns, store: str, release: str
) -> dg.RunRequest:
    west, south, east, north = run.bbox
    return dg.RunRequest(
        job_name=import_places.name,
        run_key=f"{run.key}@{stamp.isoformat()}",
        run_config=import_run_config(run),
        tags={
            # The job carries this tag too; repeated here so that a run created from the request alone (a
            # reconciliation, a test) still counts towards the queue's two slots and the admission cap.
            tags.KIND: tags.IMPORT_KIND,
            tags.IMPORT_KEY: run.key,
            tags.STORE: store,
            tags.RELEASE: release,
            tags.STAMP: tags.stamp_tag(stamp),
            tags.BOX: f"{west},{south},{east},{north}",
            tags.AREA: run.areas[0] if run.country_code else plural(len(run.areas), "cell"),
            tags.CATEGORIES: ",".join(run.categories)[:200],
            tags.PRIORITY: str(FIRST_BLOCK_PRIORITY if first_block else BACKLOG_PRIORITY),
            tags.LINE: tags.FIRST_BLOCK_LINE if first_block else tags.BACKLOG_LINE,
            tags.CAMPAIGN: tags.campaign_names(served.names, served.count),
        },
    )


def _left_out(reservation: Reservation) -> str:
    """What a tick says of the campaigns it left out because their account's plan paused them ("" if none)."""
    count = reservation.paused_for_plan
    if not count:
        return ""
    paused = (
        "1 campaign paused by its account's plan is"
        if count == 1
        else f"{count:,} campaigns paused by their account's plan are"
    )
    return f" {paused} left out (`nakodo campaign list` says why)."


def _new_partitions(instance: dg.DagsterInstance, runs: list[ImportRun]) -> list[dg.AddDynamicPartitionsRequest]:
    # Registered a block at a time, a block's cells are neighbours in the UI's grid, and a backfill of them is
    # one stretch of partitions: one run per category (the places asset's backfill policy), not one per cell.
    areas = sorted({area for run in runs for area in run.areas}, key=lambda key: (block_key(parse_area_key(key)), key))
    categories = sorted({category for run in runs for category in run.categories})
    return new_partitions_request(instance, AREA, areas) + new_partitions_request(instance, CATEGORY, categories)


def request_import_runs(
    instance: dg.DagsterInstance,
    store: Store,
    overture: OvertureResource,
    now: datetime,
    log: logging.Logger,
    *,
    campaign_ids: Sequence[int] | None = None,
    cursor: str | None = None,
    clock: StepClock | None = None,
) -> dg.SensorResult:
    """Reserve what the campaigns miss, as many runs as the queue starts within ``overture.queue_minutes``, and ask for
    one run per block or country, in fair-share order (the store's ``reserve_missing``), a campaign's first
    block at a higher Dagster priority; if anything fails before the requests are handed over, take the marks
    back.

    Every active campaign, or the active ones of ``campaign_ids``. Marks of an earlier tick whose runs never reached the
    instance are taken back first and asked for again. ``cursor`` is the sensor's (stamps known to have a
    run); the result carries the next one. ``clock``, if given, is charged with each step.
    """
    clock = clock or StepClock()
    state = ImportCursor.loads(cursor)
    state.confirmed = take_back_unlaunched(instance, store, state.confirmed, now, log)
    state.retries_checked_at = take_back_unretried(instance, store, state.retries_checked_at, now, log)
    clock.lap("orphans")
    announced = announce_release(store, overture, state, now, log)
    clock.lap("release")

    def skip(message: str) -> dg.SensorResult:
        return dg.SensorResult(skip_reason=f"{message} Tick {clock}.", cursor=state.dumps(), asset_events=announced)

    def changed() -> bool:
        # Only a noted change or a boundary crossed can make a pair missing; without either, the last look stands
        # and the queue is refilled from the line it left.
        looked = state.checked_at is None or store.needs_changed_since(state.checked_at, now)
        clock.lap("changes")
        return looked

    if overture.off_reason:
        if not changed():
            return skip(f"Imports are off ({overture.off_reason}); nothing changed since the last look.")
        counted = store.reserve_missing(now, 0, campaign_ids)
        state.checked_at, state.waiting = now - COMMIT_OVERLAP, 0
        clock.lap("needs")
        message = (
            f"{plural(counted.missing_runs, 'import run')} not asked for: {overture.off_reason}.{_left_out(counted)}"
        )
        log.warning(message)
        return skip(message)
    pace, in_flight = queue_pace(instance)
    admitted = admitted_runs(pace, in_flight, overture.queue_minutes)
    clock.lap("queue")
    if not admitted:
        return skip(
            f"The import queue is full: {plural(in_flight, 'run')} queued or running, about {pace:,.0f} an hour; "
            f"{plural(state.waiting, 'more run')} {'waits' if state.waiting == 1 else 'wait'} for it."
        )
    relook = changed()
    if not relook and not state.waiting:
        return skip("Nothing missing: nothing changed since the last look.")
    reservation = store.reserve_missing(now, admitted, campaign_ids, relook=relook)
    runs, stamp = reservation.runs, reservation.stamp
    waiting = reservation.missing_runs - len(runs)
    state.waiting = waiting
    if relook:
        state.checked_at = now - COMMIT_OVERLAP
    clock.lap("reserve")
    if not reservation.missing_runs:
        return skip(
            f"Nothing missing; imports are on their way for {plural(reservation.coming_pairs, 'pair')}."
            f"{_left_out(reservation)}"
        )
    try:
        # A release that cannot be found fails the tick and takes its marks back, not every run for 7 days.
        release = overture.current_release()
        clock.lap("release")
        blocking = _blocking_runs(instance, store.identity, runs, release, now)
        launch = [run for run in runs if run.key not in blocking]
        # The same work is queued, running or just succeeded: its marks are not ours to keep.
        store.take_back([pair for run in runs if run.key in blocking for pair in run.pairs], stamp)
        clock.lap("same work")
        requests = [
            _run_request(
                run, stamp, run.key in reservation.first_runs, reservation.served[run.key], store.identity, release
            )
            for run in launch
        ]
        partitions = _new_partitions(instance, launch)
        clock.lap("requests")
    except Exception as error:
        # Not asked for after all: the marks go, so the next tick asks again.
        release_unsent(store, [pair for run in runs for pair in run.pairs], stamp, str(error), log)
        raise
    summary = (
        f"Asked for {len(launch):,} of {plural(reservation.missing_runs, 'import run')} of release {release}"
        + (f"; {len(runs) - len(launch):,} are already queued, running or just done" if len(runs) > len(launch) else "")
        + (
            f"; {waiting:,} {'waits' if waiting == 1 else 'wait'} for the queue ({in_flight:,} queued or running, "
            f"about {pace:,.0f} runs an hour)"
            if waiting
            else ""
        )
        + "."
        + _left_out(reservation)
    )
    log.info(f"{summary} Tick {clock}.")
    if not requests:
        return skip(summary)
    return dg.SensorResult(
        run_requests=requests, dynamic_partitions_requests=partitions, cursor=state.dumps(), asset_events=announced
    )


@dg.sensor(
    # It launches import_places; reimport_places, never launched, makes the UI list it as the automation of places.
    jobs=[import_places, reimport_places],
    minimum_interval_seconds=30,
    default_status=dg.DefaultSensorStatus.RUNNING,
    description="Reserves the (area, category) pairs active campaigns miss and launches one run per block or "
    "country, keeping about 10 minutes of work in the queue (NAKODO_IMPORT_QUEUE_MINUTES). Fair share: accounts "
    "take turns, and each campaign's first block (its centre, its first category) goes before older campaigns' "
    "remaining blocks, at dagster/priority 1 so it overtakes queued runs; everything else, analysts' runs "
    "included, runs in order at priority 0.",
)
def import_sensor(
    context: dg.SensorEvaluationContext, store: StoreResource, overture: OvertureResource
) -> dg.SensorResult:
    with store.held() as held:
        return request_import_runs(
            context.instance, held, overture, datetime.now(UTC), context.log, cursor=context.cursor
        )
