"""Fair share on a real instance and a real store (both backends): a small account's first block overtakes a large
account's backlog, in the sensor's admission and in the order Dagster's queue starts runs."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.jobs.import_places import import_payload, import_places
from nakodo_dagster.pacing import DEFAULT_IMPORT_RUNS_PER_HOUR, IMPORT_SLOTS, queue_cap
from nakodo_dagster.placement import PointLocation, Targeting
from nakodo_dagster.sensors.import_sensor import import_sensor

# Ten campaigns of five 200 km circles each along the equator and the tropics: a backlog of hundreds of blocks.
BIG = [
    Targeting(tuple(PointLocation(lat, -170.0 + 35 * number + 7 * i, 200) for i in range(5)), ("cafe",))
    for number, lat in enumerate((0.1, 20.1, -20.1, 40.1, -40.1, 0.1, 20.1, -20.1, 40.1, -40.1))
]
SMALL = Targeting((PointLocation(53.75, -1.75, 10),), ("pub",))


class Queue:
    """Dagster's run queue as its coordinator serves it: the highest ``dagster/priority`` first, then the oldest."""

    def __init__(self, instance: dg.DagsterInstance, resources: dict) -> None:
        self.instance, self.resources, self.cursor = instance, resources, None

    def tick(self) -> list[dg.RunRequest]:
        """One evaluation of the import sensor, its runs created as the daemon creates them."""
        context = dg.build_sensor_context(instance=self.instance, resources=self.resources, cursor=self.cursor)
        result = import_sensor(context)
        self.cursor = result.cursor
        for request in result.dynamic_partitions_requests or []:
            self.instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        for request in result.run_requests or []:
            self.instance.create_run_for_job(import_places, run_config=request.run_config, tags=request.tags)
        return list(result.run_requests or [])

    def waiting(self) -> list[dg.DagsterRun]:
        records = self.instance.get_run_records(dg.RunsFilter(statuses=[dg.DagsterRunStatus.NOT_STARTED]))
        ordered = sorted(records, key=lambda r: (-int(r.dagster_run.tags.get(tags.PRIORITY, 0)), r.storage_id))
        return [record.dagster_run for record in ordered]

    def start_next(self, count: int = IMPORT_SLOTS) -> list[dg.DagsterRun]:
        """The next runs the queue starts; they leave it (done, as far as admission can tell)."""
        started = self.waiting()[:count]
        for run in started:
            self.instance.delete_run(run.run_id)
        return started


def pairs_of(run: dg.DagsterRun | dg.RunRequest) -> set[tuple[str, str]]:
    return {tuple(pair) for pair in import_payload(run.run_config)["pairs"]}


def test_a_new_accounts_first_block_overtakes_another_accounts_backlog(instance, resources):
    store = resources["store"].store
    big = store.add_account("big", "unlimited")
    small = store.add_account("small", "starter")
    for number, targeting in enumerate(BIG):
        store.add_campaign(f"big {number}", targeting, account_id=big)
    queue = Queue(instance, resources)

    first = queue.tick()
    backlog = store.import_line(datetime.now(UTC))[0] + len(first)
    assert backlog >= 200, "the big account's backlog of admitted and waiting block runs"
    assert len(first) == queue_cap(DEFAULT_IMPORT_RUNS_PER_HOUR), "only about ten minutes of work is queued"
    # The big account's first blocks lead its line, at the higher priority; they start first.
    assert [r.tags[tags.LINE] for r in first[: len(BIG)]] == [tags.FIRST_BLOCK_LINE] * len(BIG)
    while any(run.tags[tags.LINE] == tags.FIRST_BLOCK_LINE for run in queue.waiting()):
        queue.start_next()
        queue.tick()

    store.add_campaign("Leeds pubs", SMALL, account_id=small)
    # The queue is full: the small account's block is admitted as soon as a slot frees.
    queued_before = {run.run_id for run in queue.waiting()}
    admitted: list[dg.RunRequest] = []
    while not admitted:
        queue.start_next()
        admitted = queue.tick()

    assert ("cell:53.5,-2", "pub") in pairs_of(admitted[0]), "the first run admitted is the small account's"
    assert admitted[0].tags[tags.PRIORITY] == "1" and admitted[0].tags[tags.LINE] == tags.FIRST_BLOCK_LINE
    # In the queue, it goes before every run of the backlog that was waiting when it came.
    line = queue.waiting()
    small_run = next(i for i, run in enumerate(line) if ("cell:53.5,-2", "pub") in pairs_of(run))
    ahead = [run for run in line[:small_run] if run.run_id in queued_before]
    assert len(ahead) <= 2 * IMPORT_SLOTS
    assert ("cell:53.5,-2", "pub") in set().union(*(pairs_of(run) for run in queue.start_next(2 * IMPORT_SLOTS)))
