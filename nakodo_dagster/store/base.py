"""The store behind campaigns and imports, written once for DuckDB and PostgreSQL.

Every statement is written once, with ``$name`` parameters, in SQL both databases accept; a backend only
supplies a short transaction (``Store._transact``), the placeholder style and a bulk load of Arrow rows
(``Transaction``). No method holds a transaction across calls, nor across a call to another service.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple, TypeVar

import duckdb
import pyarrow as pa

from nakodo_dagster.drift import DriftLimits
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.placement import (
    IMPORT_WAIT_HOURS,
    LAUNCH_GRACE_MINUTES,
    REQUESTED,
    SEARCH_AGAIN_MINUTES,
    SEARCH_IN_FLIGHT,
    SEARCH_WINDOW_HOURS,
    CountryLocation,
    Cutoffs,
    ImportRun,
    Location,
    Needs,
    PlaceImport,
    PointLocation,
    Targeting,
    areas_for,
    block_key,
    check_categories,
    first_area,
    import_runs,
    parse_area_key,
    run_block,
)
from nakodo_dagster.plan_config import configured_plans, plan_named
from nakodo_dagster.plans import Holding, Usage, campaigns_to_pause, locations_in_words, refusal
from nakodo_dagster.store import carry, drift_gate, sql
from nakodo_dagster.store.models import (
    CAMPAIGN_STATUSES,
    DEFAULT_ACCOUNT_ID,
    PAIR_STATES,
    Account,
    AccountUsage,
    Campaign,
    CampaignAccount,
    CampaignLine,
    Coverage,
    HeldImport,
    ImportStatus,
    NeededPair,
    PlaceName,
    ProgressCount,
    Reservation,
    SearchProgress,
    ServedCampaigns,
    WrittenImport,
    check_account_name,
    check_campaign_name,
    check_id,
    not_found,
    targeting_from_json,
    targeting_to_json,
)
from nakodo_dagster.store.schema import MIGRATIONS

logger = logging.getLogger("nakodo_dagster")

T = TypeVar("T")

# Searches ------------------------------------------------------------------------------------------------

# A loaded pair's imported_at (and a noted change) is stamped just before its commit, and a PostgreSQL statement
# does not see a commit that lands after the statement began: a pair stamped shortly before a search or a sensor
# tick began may be invisible to it. So each vouches only for what was stamped this long before it began, and the
# next one reads that stretch again (harmless: each business is added once, a pair recounted twice counts once).
# The margin also absorbs clock drift between the writer's machine and the reader's.
COMMIT_OVERLAP = timedelta(minutes=1)
# A count's ranges start after a moment (sql.CREATE_RECOUNT); a change stamped at the very moment a count vouches
# for may commit after it, so the next starts this much earlier and reads it (both stores keep microseconds).
_JUST_BEFORE = timedelta(microseconds=1)
# What a campaign's first search, or its first after its targeting changed, reads: everything loaded.
_EVER = datetime(1970, 1, 1, tzinfo=UTC)
# What one count or look works out again at most, the rest left for the next: a tick after any change, however big
# (a release gone stale at once, a daemon back after a day), stays within seconds. A queued pair moves 1 to 3
# campaign areas of a 10,000-campaign fleet; a block holds about 500 of its campaigns' pairs there, and 500 blocks
# took 0.3 to 0.65 s of a look's statements (a cold start's 10,765 blocks are lined up over 43 looks at 250,
# campaigns' first blocks first, while the queue admits about 12 blocks a look).
PROGRESS_PAIRS_PER_COUNT = 10_000
LINE_BLOCKS_PER_LOOK = 250
# The names of the campaigns an import run serves that a reservation hands back: more than its tag shows.
SERVED_NAMES = 40
# A count reads at most this many pairs of each of its ranges (sql.CREATE_RECOUNT), oldest first, and the next
# goes on from where it stopped: 200 campaigns added at once change about 80,000 needed pairs, a new release
# makes every loaded pair due within a minute, and one count of all of them took 11 to 17 s at 10,000 campaigns;
# 10,000 a range kept every tick under 6 s, and restating them still dominated most ticks.
COUNT_PAIRS_PER_RANGE = 5_000
# A moment no change reaches: a count afresh reads needs from place_imports alone.
_NEVER = datetime(9999, 1, 1, tzinfo=UTC)

# The version whose tables keep each campaign's needs (campaign_areas, campaign_categories).
_CAMPAIGN_NEEDS_VERSION = 3
# The version that keeps each campaign's first area (campaigns.first_area).
_FIRST_AREA_VERSION = 5
# The version that counts each pair's campaigns (needed_pairs).
_NEEDED_PAIRS_VERSION = 6
# The version that keeps where the coverage count stopped in each of its ranges.
_COUNT_RANGES_VERSION = 14


@functools.cache
def _parameter_names(statement: str) -> frozenset[str]:
    return frozenset(re.findall(r"\$([A-Za-z_]\w*)", statement))


class Transaction(ABC):
    """One open transaction: the only way the store's SQL reaches a database."""

    def __init__(self, cursor: Any) -> None:
        self._cursor = cursor

    def _translate(self, statement: str) -> str:
        """The statement in the driver's placeholder style; ``$name`` is DuckDB's own."""
        return statement

    def run(self, statement: str, **params: Any) -> None:
        """Execute one statement with those of ``params`` it names (DuckDB refuses any other)."""
        named = _parameter_names(statement)
        self._cursor.execute(
            self._translate(statement), {name: value for name, value in params.items() if name in named}
        )

    def rows(self, statement: str, **params: Any) -> list[tuple]:
        """Execute one statement and return its rows."""
        self.run(statement, **params)
        return self._cursor.fetchall()

    @abstractmethod
    def written(self, statement: str, **params: Any) -> int:
        """Execute one INSERT, UPDATE or DELETE and return how many rows it wrote."""

    @abstractmethod
    def load_incoming_places(self, places: pa.Table) -> None:
        """Bulk-load normalised rows (``sql.INCOMING_COLUMNS``, in order) into the temp table incoming_places."""

    @abstractmethod
    def analyze(self, *tables: str) -> None:
        """Give the planner the sizes of these temp tables (the store's names, never user text), which drive the
        statements after them."""

    @abstractmethod
    def keep_coverage_statistics(self, restated: int) -> None:
        """After a count restated ``restated`` pairs of coverage_pairs: bring the planner's statistics of the table
        up to date if they no longer describe it."""


def _reline(tx: Transaction, rule: dict[str, Any]) -> int:
    """Work out again the kept demand (line_demand) and missing pairs (line_pairs) of the oldest noted blocks, at
    most LINE_BLOCKS_PER_LOOK, campaigns' first blocks first; returns how many were looked at."""
    tx.run(sql.CREATE_RELINED, blocks=LINE_BLOCKS_PER_LOOK)
    tx.analyze("relined")
    [(relined,)] = tx.rows(sql.RELINED)
    tx.run(sql.CREATE_RELINED_NEEDED, **rule)
    tx.run(sql.CREATE_RELINED_BLOCKS)
    tx.analyze("relined_blocks")
    tx.run(sql.FORGET_RELINED_DEMAND)
    tx.run(sql.KEEP_WHOLE_BLOCKS_DEMAND)
    [(partial,)] = tx.rows(sql.PARTIAL_BLOCKS)
    if partial:
        tx.run(sql.KEEP_PARTIAL_BLOCKS_DEMAND)
    tx.run(sql.FORGET_RELINED_PAIRS)
    tx.run(sql.KEEP_RELINED_PAIRS)
    tx.run(sql.LEAVE_RELINED)
    return relined


def _check_release(release: str) -> None:
    if not isinstance(release, str) or not release or release == REQUESTED:
        raise InvalidInput(f"release {release!r} is not allowed: use an Overture release name, e.g. 2026-11-18.0")


def _pair_params(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    # Unique, as DuckDB refuses to update one row twice in a statement. Not sorted: the order rows are locked in
    # is the statement's (the reservation sorts in SQL), and sorting a big tick's pairs in Python took a second.
    unique = list(dict.fromkeys(pairs))
    return {"areas": [a for a, _ in unique], "categories": [c for _, c in unique]}


def _by_area(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for area, category in pairs:
        grouped.setdefault(area, []).append(category)
    return {area: sorted(grouped[area]) for area in sorted(grouped)}


def _incoming(places: pa.Table) -> pa.Table:
    """The rows to write, with exactly ``sql.INCOMING_COLUMNS``; list or struct columns become JSON text."""
    absent = [name for name in sql.INCOMING_COLUMNS if name not in places.column_names]
    if absent:
        raise InvalidInput(f"places table lacks columns {absent}; needed: {list(sql.INCOMING_COLUMNS)}")
    rows = places.select(list(sql.INCOMING_COLUMNS))
    text = (pa.types.is_string, pa.types.is_large_string)
    to_json = [n for n in sql.TEXT_OR_JSON_COLUMNS if not any(is_text(rows.schema.field(n).type) for is_text in text)]
    if not to_json:
        return rows
    # Column names come from sql.INCOMING_COLUMNS, never from the caller.
    select = ", ".join(
        f"to_json({name})::VARCHAR AS {name}" if name in to_json else name for name in sql.INCOMING_COLUMNS
    )
    with duckdb.connect() as memory:
        memory.register("incoming", rows)
        return memory.execute(f"SELECT {select} FROM incoming").to_arrow_table()


def _campaign(row: tuple) -> Campaign:
    id_, name, targeting, status, created_at, account_id, paused_reason = row
    return Campaign(id_, name, targeting_from_json(targeting), status, created_at, account_id, paused_reason)


def _result(row: tuple) -> dict[str, Any]:
    result = dict(zip(sql.RESULT_COLUMNS, row, strict=True))
    for name in ("websites", "phones"):
        if result[name] is not None:
            result[name] = json.loads(result[name])
    return result


def _rule(now: datetime) -> dict[str, Any]:
    """The parameters of ``sql.pair_state``: the freshness boundaries at ``now``, from placement.Cutoffs."""
    return {"requested": REQUESTED, **asdict(Cutoffs.at(now))}


def _rule_since(since: datetime, now: datetime) -> dict[str, Any]:
    """``_rule(now)`` and the same boundaries at ``since`` (``*_then``): what crossed one in between."""
    then = {f"{name}_then": value for name, value in asdict(Cutoffs.at(since)).items()}
    return {**_rule(now), **then, "since": since}


# The ranges of a coverage count (sql.CREATE_RECOUNT), each kept in coverage_counted as ``{name}_through``, with
# the statement that finds where COUNT_PAIRS_PER_RANGE of its rows end.
_COUNT_RANGES = (
    ("needs", sql.NEEDS_RANGE_CUT),
    ("imports", sql.IMPORTS_RANGE_CUT),
    ("fresh", sql.IMPORTS_RANGE_CUT),
    ("coming", sql.IMPORTS_RANGE_CUT),
    ("retry", sql.IMPORTS_RANGE_CUT),
)


def _import_ranges_through(moment: datetime) -> dict[str, datetime]:
    """The place_imports ranges of a count that saw everything up to ``moment``: the rows dated up to it, and
    those that crossed each freshness boundary by then."""
    crossed = {f"{boundary}_through": value for boundary, value in _boundaries(moment).items()}
    return {"imports_through": moment, **crossed}


def _boundaries(moment: datetime) -> dict[str, datetime]:
    cutoffs = Cutoffs.at(moment)
    return {"fresh": cutoffs.fresh_after, "coming": cutoffs.coming_after, "retry": cutoffs.retry_after}


def _note_needs_changed(tx: Transaction) -> None:
    # The transaction's last statement, stamped as late as possible: a sensor tick that began before this commit
    # and did not see it looks again (it reads changes from COMMIT_OVERLAP before its own start).
    tx.run(sql.NOTE_NEEDS_CHANGED, changed_at=datetime.now(UTC))


def _count_needs(tx: Transaction, campaign_ids: Sequence[int], change: int, areas: Sequence[str] | None = None) -> None:
    """The campaigns start (``change`` 1) or stop (-1) needing their pairs, or only those of ``areas``: kept in
    needed_pairs, with the fleet's count of needed pairs, for the coverage count. Called under the account's lock,
    which makes the change itself one at a time."""
    became = 0
    for campaign_id in campaign_ids:
        rows = tx.rows(
            sql.CHANGE_NEEDED_PAIRS,
            campaign_id=campaign_id,
            change=change,
            every_area=areas is None,
            areas=list(areas or ()),
            changed_at=datetime.now(UTC),
        )
        # A pair at 1 after a start was needed by none before; at 0 after a stop, it is needed by none now.
        became += sum(1 for (campaigns,) in rows if campaigns == max(change, 0))
    if became:
        tx.run(sql.CHANGE_NEEDED_TOTAL, change=became * change)


def _note_progress_due(tx: Transaction, campaign_id: int) -> None:
    """The campaign's needs changed: the next count counts its progress whole."""
    tx.run(sql.NOTE_PROGRESS_DUE, campaign_id=campaign_id, due_at=datetime.now(UTC))


def _forget_progress(tx: Transaction, campaign_ids: Iterable[int]) -> None:
    """Paused campaigns keep no progress: a campaign resumed is counted whole again."""
    for campaign_id in campaign_ids:
        for statement in sql.FORGET_CAMPAIGN_PROGRESS:
            tx.run(statement, campaign_id=campaign_id)


class _Recount(NamedTuple):
    """What one coverage count worked out again."""

    pairs: int
    campaign_areas: int


def _count_progress_whole(tx: Transaction, *, everyone: bool) -> int:
    """Count the progress of the campaigns noted due, or of every active campaign, from the kept coverage; a
    campaign noted since this count read the notes stays noted. Returns the (campaign, area) rows looked at."""
    tx.run(sql.CREATE_DUE_READ, everyone=everyone)
    tx.run(sql.CREATE_COUNTED_CAMPAIGNS, everyone=everyone)
    tx.run(sql.CREATE_COUNTED_AREAS, everyone=everyone)
    tx.analyze("counted_campaigns", "counted_areas")
    tx.run(sql.FORGET_COUNTED_AREAS, everyone=everyone)
    tx.run(sql.KEEP_COUNTED_AREAS, requested=REQUESTED)
    tx.run(sql.FORGET_UNCOUNTED_PROGRESS, everyone=everyone)
    tx.run(sql.KEEP_COUNTED_PROGRESS)
    tx.run(sql.LEAVE_DUE)
    return tx.rows(sql.COUNTED_AREAS)[0][0]


def _campaign_filter(campaign_ids: Sequence[int] | None) -> dict[str, Any]:
    if campaign_ids is None:
        return {"everyone": True, "campaign_ids": []}
    return {"everyone": False, "campaign_ids": [check_id("campaign", i) for i in campaign_ids]}


def _keep_campaign_areas(tx: Transaction, campaign_id: int, targeting: Targeting) -> list[str]:
    """Keep the areas the targeting needs beside the campaign (those it keeps already stay as they are); returns
    the areas new to it."""
    areas = areas_for(targeting)
    rows = tx.rows(
        sql.KEEP_CAMPAIGN_AREAS,
        campaign_id=campaign_id,
        areas=list(areas),
        blocks=[block_key(area) for area in areas.values()],
    )
    return [area for (area,) in rows]


def _keep_first_area(tx: Transaction, campaign_id: int, targeting: Targeting) -> None:
    tx.run(sql.KEEP_FIRST_AREA, campaign_id=campaign_id, first_area=first_area(targeting).key)


def _ranked_categories(targeting: Targeting) -> list[str]:
    """The campaign's categories, each once, first first: campaign_categories' rank is the position here."""
    return list(dict.fromkeys(targeting.categories))


def _keep_campaign_needs(tx: Transaction, campaign_id: int, targeting: Targeting) -> None:
    """Keep a new campaign's areas, its first area and its categories in the campaign's own order."""
    _keep_campaign_areas(tx, campaign_id, targeting)
    _keep_first_area(tx, campaign_id, targeting)
    ordered = _ranked_categories(targeting)
    tx.run(sql.KEEP_CAMPAIGN_CATEGORIES, campaign_id=campaign_id, categories=ordered, ranks=list(range(len(ordered))))


class Store(ABC):
    """place_imports, places, campaigns and campaign_businesses, in one database."""

    # Serialises migrators that reach the database at the same moment; None where the backend already does.
    _MIGRATION_LOCK: str | None = None
    # Run first in a campaign's search ($campaign_id): where two searches of one campaign can overlap, they take
    # turns, so that the second sees what the first added and inserts no business twice.
    _SEARCH_SETUP: tuple[str, ...] = ()
    # How a search keeps one row per place (sql.add_found_businesses).
    _FIRST_PER_PLACE = sql.FIRST_BY_WINDOW
    # Statements this backend alone runs after a migration's own, by version.
    _MIGRATIONS_OF_ITS_OWN: Mapping[int, tuple[str, ...]] = {}

    @abstractmethod
    def _transact(self, work: Callable[[Transaction], T]) -> T:
        """Run ``work`` in one short transaction: committed if it returns, rolled back if it raises."""

    # Schema

    def migrate(self) -> None:
        """Create or upgrade the tables to the newest schema; safe to repeat and to run from many processes."""

        def work(tx: Transaction) -> None:
            if self._MIGRATION_LOCK:
                tx.rows(self._MIGRATION_LOCK)
            tx.run(
                "CREATE TABLE IF NOT EXISTS schema_migrations "
                "(version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL)"
            )
            [(reached,)] = tx.rows(sql.SCHEMA_VERSION)
            for version, statements in MIGRATIONS:
                if version > reached:
                    for statement in (*statements, *self._MIGRATIONS_OF_ITS_OWN.get(version, ())):
                        tx.run(statement)
                    if version == _COUNT_RANGES_VERSION:
                        # Where the count before this version would have started its next: the minute before it.
                        [(counted_at,)] = tx.rows(sql.COUNTED_AT)
                        moment = counted_at - COMMIT_OVERLAP - _JUST_BEFORE
                        tx.run(sql.KEEP_IMPORT_RANGES, **_import_ranges_through(moment))
                    tx.run(
                        "INSERT INTO schema_migrations (version, applied_at) VALUES ($version, $now)",
                        version=version,
                        now=datetime.now(UTC),
                    )
            if reached < _FIRST_AREA_VERSION:
                # Campaigns older than the columns that keep their needs: their areas come from Python.
                keep = _keep_campaign_needs if reached < _CAMPAIGN_NEEDS_VERSION else _keep_first_area
                for campaign in tx.rows(f"SELECT {sql.CAMPAIGN_COLUMNS} FROM campaigns"):
                    campaign = _campaign(campaign)
                    keep(tx, campaign.id, campaign.targeting)
            if reached < _NEEDED_PAIRS_VERSION:
                tx.run(sql.COUNT_NEEDED_PAIRS)
                tx.run(sql.COUNT_NEEDED_TOTAL, states=list(PAIR_STATES))

        self._transact(work)

    def schema_version(self) -> int:
        """The newest migration this database has applied."""
        return self._transact(lambda tx: tx.rows(sql.SCHEMA_VERSION)[0][0])

    # The freshness table

    def import_rows(self, areas: Iterable[str], categories: Iterable[str]) -> list[PlaceImport]:
        """What place_imports says about every (area, category) pair of these areas and categories."""
        params = {"areas": sorted(set(areas)), "categories": sorted(set(categories))}
        rows = self._transact(lambda tx: tx.rows(sql.IMPORT_ROWS, **params))
        return [PlaceImport(*row) for row in rows]

    def reserve(self, missing: Mapping[str, Iterable[str]], stamp: datetime, now: datetime) -> dict[str, list[str]]:
        """Mark missing pairs as requested where nobody else has; the pairs returned are ours to import."""
        pairs = [(area, category) for area, categories in missing.items() for category in categories]
        return _by_area(self._mark(pairs, stamp, now, force=False))

    def force_request(self, pairs: Iterable[tuple[str, str]], now: datetime) -> datetime:
        """The analyst's override: mark pairs as requested whatever their age; returns the marks' stamp."""
        self._mark(pairs, now, now, force=True)
        return now

    def _mark(
        self, pairs: Iterable[tuple[str, str]], stamp: datetime, now: datetime, *, force: bool
    ) -> list[tuple[str, str]]:
        params = _pair_params(pairs)
        if not params["areas"]:
            return []
        return self._transact(lambda tx: tx.rows(sql.MARK, **params, **_rule(now), stamp=stamp, force=force))

    def take_back(self, pairs: Iterable[tuple[str, str]], stamp: datetime) -> int:
        """Delete this caller's unused marks (its exact stamp) so the next look asks again; returns how many."""
        params = _pair_params(pairs)
        if not params["areas"]:
            return 0
        return len(self._rows_changing_needs(sql.TAKE_BACK, **params, requested=REQUESTED, stamp=stamp))

    def mark_failed(self, pairs: Iterable[tuple[str, str]], stamp: datetime, now: datetime, reason: str) -> int:
        """Record that a failed import's own marks (its exact ``stamp``) failed at ``now``, and why: they read as
        failed at once, so campaigns stop waiting, and are asked for again RETRY_DAYS after ``now``. Returns how
        many marks were recorded as failed (a mark already failed, or replaced by another, is left as it is)."""
        params = _pair_params(pairs)
        if not params["areas"]:
            return 0
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("a failed import needs a reason in words, e.g. 'file part-00003.parquet is unreadable'")
        return len(
            self._rows_changing_needs(
                sql.MARK_FAILED, **params, requested=REQUESTED, stamp=stamp, failed_at=now, failure=reason.strip()
            )
        )

    def _rows_changing_needs(self, statement: str, **params: Any) -> list[tuple]:
        """The rows a statement returns; if it returns any, the change is noted for the sensors."""

        def work(tx: Transaction) -> list[tuple]:
            rows = tx.rows(statement, **params)
            if rows:
                touched = _pair_params((area, category) for area, category, *_ in rows)
                blocks = [block_key(parse_area_key(area)) for area in touched["areas"]]
                tx.run(sql.TOUCH_NEEDED_PAIRS, **touched, blocks=blocks, changed_at=datetime.now(UTC))
                _note_needs_changed(tx)
            return rows

        return self._transact(work)

    def needs_changed_since(self, since: datetime, now: datetime) -> bool:
        """Whether a pair may have become missing after ``since``: a noted change (a campaign added or changed,
        a mark taken back or failed), or a release or a failed mark aging past its boundary."""

        def work(tx: Transaction) -> bool:
            [(noted,)] = tx.rows(sql.NEEDS_CHANGED_SINCE, since=since)
            if noted:
                return True
            [(aged,)] = tx.rows(sql.AGED_INTO_MISSING, **_rule_since(since, now))
            return bool(aged)

        return self._transact(work)

    # Asking for imports

    def reserve_missing(
        self, now: datetime, max_runs: int, campaign_ids: Sequence[int] | None = None, *, relook: bool = True
    ) -> Reservation:
        """Mark the missing pairs of at most ``max_runs`` import runs, in the database, and group what we got.

        ``relook`` finds the missing pairs again: the campaigns' kept areas and categories (every active
        campaign, or the active ones of ``campaign_ids``) anti-joined with place_imports under the one freshness
        rule, lined up in fair-share order (``sql.line_up``: accounts take turns, each campaign's first block
        before the rest). For the whole fleet, only in the blocks whose pairs changed since the last look (the
        coverage count notes them); its demand and its line are kept, so that without ``relook`` a tick admits
        from the line's head and finds again only the admitted blocks' missing pairs. The runs come back in line
        order, the counts before admission. ``max_runs=0`` reserves nothing and only counts. Campaigns their
        account's plan paused are left out, as every paused one is, and counted.
        """
        if max_runs < 0:
            raise InvalidInput(f"max_runs {max_runs!r} is not allowed: use 0 or more")
        rule, campaigns = _rule(now), _campaign_filter(campaign_ids)
        # A sync of some campaigns lines up its own, and leaves the fleet's line as it is.
        keep_line = campaign_ids is None
        relook = relook or not keep_line
        line = "new_line" if relook else "import_line"

        def work(tx: Transaction) -> tuple[int, int, int, int, list[tuple], list[tuple], int, list[tuple]]:
            relined = 0
            if relook and keep_line:
                # The coverage count notes the blocks whose pairs changed since it last counted: only those are
                # looked at again, and the fleet's kept demand lined up.
                self._recount_coverage(tx, now)
                relined = _reline(tx, rule)
                tx.run(sql.line_up("line_demand", "line_pairs"))
            elif relook:
                tx.run(sql.CREATE_MISSING, **rule, **campaigns)
                tx.run(sql.CREATE_CAMPAIGN_BLOCK_PAIRS, **rule, **campaigns)
                tx.run(sql.line_up("missing_demand", "block_pairs"))
            [(missing_runs, missing_pairs)] = tx.rows(sql.LINE_TOTALS if relook else sql.LINE_SUMMARY)
            [(coming_pairs,)] = tx.rows(sql.COMING_PAIRS, **rule)
            [(paused_for_plan,)] = tx.rows(sql.PAUSED_FOR_PLAN, **campaigns)
            tx.run(sql.admit_from(line), max_runs=max_runs)
            order = tx.rows(sql.ADMITTED_ORDER)
            if not order:
                reserved = []
            elif keep_line:
                reserved = tx.rows(sql.RESERVE_ADMITTED_NEEDED, **rule, stamp=now, force=False)
            else:
                reserved = tx.rows(sql.RESERVE_ADMITTED, **rule, **campaigns, stamp=now, force=False)
            served = tx.rows(sql.SERVED_CAMPAIGNS, stamp=now, names=SERVED_NAMES) if reserved else []
            if keep_line and relook:
                tx.run(sql.FORGET_LINE)
                tx.run(sql.KEEP_LINE)
            elif keep_line:
                tx.run(sql.LEAVE_LINE)
            return missing_pairs, missing_runs, coming_pairs, paused_for_plan, reserved, order, relined, served

        missing_pairs, missing_runs, coming_pairs, paused_for_plan, reserved, order, relined, served = self._transact(
            work
        )
        by_area = _by_area(reserved)
        runs = import_runs(by_area, {key: parse_area_key(key) for key in by_area})
        turn = {block: position for position, (block, _) in enumerate(order)}
        runs.sort(key=lambda run: turn[run_block(run)])
        first_blocks = {block for block, first in order if first}
        first_runs = frozenset(run.key for run in runs if run_block(run) in first_blocks)
        by_block: dict[str, ServedCampaigns] = {}
        for block, name, count in served:
            named = by_block.get(block, ServedCampaigns((), count))
            by_block[block] = ServedCampaigns((*named.names, name), count)
        by_run = {run.key: by_block.get(run_block(run), ServedCampaigns((), 0)) for run in runs}
        return Reservation(
            now, runs, missing_runs, missing_pairs, coming_pairs, paused_for_plan, first_runs, relined, by_run
        )

    def needs(self, now: datetime, campaign_ids: Sequence[int] | None = None) -> Needs:
        """``placement.import_needs`` of the campaigns' pairs merged, computed by the database."""
        params = {**_rule(now), **_campaign_filter(campaign_ids)}

        def work(tx: Transaction) -> Needs:
            missing = _by_area(tx.rows(sql.NEEDS_MISSING, **params))
            coming = {area for (area,) in tx.rows(sql.NEEDS_COMING, **params)}
            [(arrived_at,)] = tx.rows(sql.NEEDS_ARRIVED_AT, **params)
            return Needs(missing, coming, arrived_at)

        return self._transact(work)

    def coverage(self, now: datetime, listed: int) -> Coverage:
        """The pairs active campaigns need, by the one freshness rule at ``now``: counted per state, and at most
        ``listed`` of each state (0 lists none), oldest first. Pairs no campaign needs are left out.

        The counts are kept, and each count works out again only the pairs that may have changed since the one
        before (``recount_coverage``): what it costs grows with what changed, not with the campaigns.
        """
        if listed < 0:
            raise InvalidInput(f"listed {listed!r} is not allowed: use 0 or more")

        def work(tx: Transaction) -> Coverage:
            recounted = self._recount_coverage(tx, now).pairs
            kept = dict(tx.rows(sql.COVERAGE_COUNTS))
            counts = {state: kept[state] for state in PAIR_STATES if state != "missing"}
            # Missing is what the other states leave of the needed pairs. A write landing between the count
            # and this read can make it a pair or two off until the next count, never below zero.
            counts["missing"] = max(0, kept["needed"] - sum(counts.values()))
            listed_pairs = []
            for state in PAIR_STATES:
                if state == "missing" and counts["missing"] > kept["missing"]:
                    never_asked = tx.rows(sql.NEVER_ASKED_LISTED, listed=listed)
                    listed_pairs += [NeededPair(area, category, state, None, None) for area, category in never_asked]
                    room = listed - len(never_asked)
                else:
                    room = listed
                if room > 0:
                    listed_pairs += [NeededPair(*row) for row in tx.rows(sql.COVERAGE_LISTED, state=state, listed=room)]
            return Coverage({state: counts[state] for state in PAIR_STATES}, listed_pairs, recounted)

        return self._transact(work)

    def recount_coverage(self, now: datetime) -> int:
        """Work out again the state of every needed pair that may have changed since the last count (every pair
        with a place_imports row on the first count, or when ``now`` is before the last count's); returns how
        many pairs were looked at."""
        return self._transact(lambda tx: self._recount_coverage(tx, now).pairs)

    @staticmethod
    def _recount_coverage(tx: Transaction, now: datetime) -> _Recount:
        started = datetime.now(UTC)
        [(counted_at, *through)] = tx.rows(sql.LOCK_COVERAGE_COUNTED)
        starts = dict(zip((name for name, _ in _COUNT_RANGES), through, strict=True))
        # Where each range ends now, and up to when a count that reads all of it vouches for it: a change is
        # stamped before its commit, so the last COMMIT_OVERLAP of changes is read again by the next count.
        ends = {"needs": _NEVER, "imports": _NEVER, **_boundaries(now)}
        overlap = COMMIT_OVERLAP + _JUST_BEFORE
        vouched = {"needs": started - overlap, "imports": now - overlap, **_boundaries(now)}
        from_scratch = counted_at == _EVER or now < counted_at
        if from_scratch:
            # Counted afresh: every pair with a place_imports row, whatever their number. One without is missing,
            # as it was; a change to its needs alone moves only the needed count, which its writer keeps.
            tx.run(sql.FORGET_COVERAGE)
            tx.run(sql.FORGET_COVERAGE_COUNTS)
            starts = {"needs": _NEVER, "imports": _EVER, **_boundaries(now)}
        else:
            for name, cut in _COUNT_RANGES:
                [(taken, last)] = tx.rows(cut, start=starts[name], end=ends[name], pairs=COUNT_PAIRS_PER_RANGE)
                if taken == COUNT_PAIRS_PER_RANGE:
                    # The rest of the range waits for the next count, which starts after the last time taken
                    # (every row of that time is taken with it, so none is left between two counts).
                    ends[name] = last
                    vouched[name] = min(last, vouched[name])
        ranges = {
            f"{name}_{edge}": moment
            for edge, edges in (("start", starts), ("end", ends))
            for name, moment in edges.items()
        }
        tx.run(sql.CREATE_RECOUNT, **ranges)
        tx.run(sql.CREATE_RESTATED, **_rule(now))
        tx.analyze("restated")
        tx.run(sql.MOVE_COVERAGE_COUNTS)
        tx.run(sql.NOTE_EVERY_LINE_DUE if from_scratch else sql.NOTE_RESTATED_LINE_DUE, now=now)
        tx.run(sql.FORGET_RESTATED)
        tx.run(sql.KEEP_RESTATED)
        if from_scratch:
            # Every campaign is counted whole below.
            tx.run(sql.FORGET_PROGRESS_QUEUE)
            moved = 0
        else:
            tx.run(sql.QUEUE_MOVED_PAIRS, now=now)
            tx.run(sql.CREATE_MOVING_PAIRS, pairs=PROGRESS_PAIRS_PER_COUNT)
            tx.run(sql.LEAVE_MOVING_PAIRS)
            tx.run(sql.CREATE_AREAS_MOVED)
            tx.analyze("areas_moved")
            tx.run(sql.CREATE_AREA_MOVES, requested=REQUESTED)
            tx.run(sql.FORGET_MOVED_AREAS)
            tx.run(sql.KEEP_MOVED_AREAS)
            tx.run(sql.MOVE_PROGRESS)
            [(moved,)] = tx.rows(sql.AREAS_MOVED)
        counted = _count_progress_whole(tx, everyone=from_scratch)
        through = {f"{name}_through": at for name, at in vouched.items()}
        tx.run(sql.KEEP_COVERAGE_COUNTED, counted_at=now, **through)
        [(recounted,)] = tx.rows(sql.RECOUNTED)
        tx.keep_coverage_statistics(recounted)
        return _Recount(recounted, moved + counted)

    def marks_awaiting_run(self, now: datetime) -> dict[datetime, int]:
        """The stamps of marks whose run should exist by now (past the launch grace, not yet failed), and how
        many marks carry each."""
        launched_before = now - timedelta(minutes=LAUNCH_GRACE_MINUTES)
        return dict(self._transact(lambda tx: tx.rows(sql.AWAITING_RUN, **_rule(now), launched_before=launched_before)))

    def marks_stamped(self, stamp: datetime) -> list[tuple[str, str]]:
        """The pairs whose mark carries exactly this stamp."""
        return self._transact(lambda tx: tx.rows(sql.STAMPED, requested=REQUESTED, stamp=stamp))

    # Imports

    def write_import(
        self,
        run: ImportRun,
        release: str,
        places: pa.Table,
        now: datetime | None = None,
        *,
        stamp: datetime | None = None,
        gate: DriftLimits | None = None,
        accept: bool = False,
    ) -> WrittenImport:
        """Replace the places of the run's pairs and record the release, all at once.

        ``imported_at`` is ``now`` if given, else the moment just before the commit, when the places become
        visible: a search that ran while this import was reading must still find them new afterwards. ``stamp``
        is the run's own marks' stamp: a pair whose mark on its way carries another is reported as replaced.

        With ``gate``, a pair that holds places of an older release is measured against the new rows first
        (``drift``); past the limits, its new rows are held (``held_imports``) and it keeps its places and release,
        dated now, unless ``accept`` (an analyst's re-import, measured all the same). Without a gate nothing is
        measured. A pair whose rows land has nothing held any more.
        """
        _check_release(release)
        params = _pair_params(run.pairs)
        if not params["areas"]:
            return WrittenImport({}, {})
        incoming = _incoming(places)

        def work(tx: Transaction) -> WrittenImport:
            written_at = now or datetime.now(UTC)
            others = tx.rows(sql.OTHERS_ON_THEIR_WAY, **params, **_rule(written_at), stamp=stamp)
            tx.run(sql.CREATE_INCOMING)
            tx.load_incoming_places(incoming)
            # Recorded first: the upsert locks the pairs' rows, so a second writer of the same pairs (an analyst's
            # re-materialisation) waits for this one and then replaces its places rather than colliding with them.
            recorded = tx.rows(sql.RECORD_IMPORTS, **params, release=release, now=written_at)
            compared = drift_gate.measure(tx, params, release) if gate is not None else {}
            holding = drift_gate.hold(tx, compared, gate, written_at) if gate is not None and not accept else {}
            landing = _pair_params(pair for pair in run.pairs if pair not in holding) if holding else params
            if landing["areas"]:
                drift_gate.forget(tx, landing)
                tx.run(sql.DELETE_PLACES, **landing)
                tx.run(sql.INSERT_PLACES, **landing, release=release)
            if now is None:
                tx.run(sql.STAMP_IMPORTS, **params, committed_at=datetime.now(UTC))
            return WrittenImport(
                {
                    (area, category): holding[(area, category)].drift.before if (area, category) in holding else rows
                    for area, category, rows in recorded
                },
                {(area, category): other for area, category, other in others},
                compared,
                holding,
            )

        return self._transact(work)

    def read_from(self, pairs: Iterable[tuple[str, str]], release: str) -> list[tuple[str, str]]:
        """Those of ``pairs`` whose places came from ``release`` (kept while a mark or a failure stands)."""
        params = _pair_params(pairs)
        return self._transact(lambda tx: carry.read_from(tx, params, release)) if params["areas"] else []

    def carry_over(
        self,
        pairs: Iterable[tuple[str, str]],
        release: str,
        base: str,
        removed: Iterable[str],
        now: datetime | None = None,
        *,
        stamp: datetime | None = None,
    ) -> WrittenImport:
        """Move to ``release``, without reading it, those of ``pairs`` whose places came from ``base`` (the release
        before it, which its changelog compares with) and hold none of the ``removed`` ids: their places stay, the
        pair is fresh again and has nothing held any more. The rest is left as it is, to be read. ``now`` and
        ``stamp`` are as for ``write_import``: the date (else the commit's) and the run's own marks' stamp."""
        _check_release(release)
        params = _pair_params(pairs)
        removed = sorted(set(removed))

        def work(tx: Transaction) -> WrittenImport:
            carried = carry.carriable(tx, params, base, removed) if params["areas"] else []
            if not carried:
                return WrittenImport({}, {})
            landing = _pair_params(carried)
            written_at = now or datetime.now(UTC)
            others = tx.rows(sql.OTHERS_ON_THEIR_WAY, **landing, **_rule(written_at), stamp=stamp)
            drift_gate.forget(tx, landing)
            rows = carry.carry(tx, landing, release, written_at)
            if now is None:
                tx.run(sql.STAMP_IMPORTS, **landing, committed_at=datetime.now(UTC))
            return WrittenImport(rows, {(area, category): other for area, category, other in others})

        return self._transact(work)

    def count_places(self, pairs: Iterable[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """How many places are loaded for each of these pairs (pairs with none are left out)."""
        params = _pair_params(pairs)
        rows = self._transact(lambda tx: tx.rows(sql.COUNT_PLACES, **params))
        return {(area, category): count for area, category, count in rows}

    def forget_failed_import(self, area: str, category: str, now: datetime) -> PlaceImport | None:
        """The analyst's override of the 7-day block: delete the pair's failed mark, so the next look asks again.

        Returns the mark deleted, or None when the pair had no failed mark to forget (never asked for, an import
        on its way, or a real release loaded): those stay as they are.
        """
        area = parse_area_key(area).key
        (category,) = check_categories([category])
        rows = self._rows_changing_needs(sql.FORGET_FAILED_IMPORT, area=area, category=category, **_rule(now))
        return PlaceImport(*rows[0]) if rows else None

    def held_imports(self) -> list[HeldImport]:
        """The pairs whose newer release's rows the drift gate holds, oldest hold first, with their numbers."""
        return [drift_gate.held_import(row) for row in self._transact(lambda tx: tx.rows(drift_gate.HELD))]

    def accept_held(self, area: str, category: str) -> HeldImport:
        """The analyst's acceptance: the pair's held rows replace its places, in one transaction, and land as an
        import does (dated at the commit, so searches read them). InvalidInput, with nothing written, when the pair
        is not a valid key or has nothing held."""
        area = parse_area_key(area).key
        (category,) = check_categories([category])
        accepted = self._transact(lambda tx: drift_gate.accept(tx, area, category))
        if accepted is None:
            raise InvalidInput(
                f"nothing is held for {category} in {area}: `nakodo imports status` lists the held pairs"
            )
        return accepted

    def import_status(self, now: datetime) -> list[ImportStatus]:
        """Per category, how many pairs are fresh, on their way, failed or stale, and the oldest release."""
        rows = self._transact(lambda tx: tx.rows(sql.IMPORT_STATUS, **_rule(now)))
        return [ImportStatus(*row) for row in rows]

    def import_line(self, now: datetime, campaign_ids: Sequence[int] | None = None) -> tuple[int, list[CampaignLine]]:
        """How many blocks wait in the kept fair-share line, and where each active campaign (or each named)
        stands in it."""
        params = {**_rule(now), **_campaign_filter(campaign_ids)}

        def work(tx: Transaction) -> tuple[int, list[tuple]]:
            [(blocks, _)] = tx.rows(sql.LINE_SUMMARY)
            return blocks, tx.rows(sql.CAMPAIGN_LINES, **params)

        blocks, rows = self._transact(work)
        return blocks, [CampaignLine(*row) for row in rows]

    # Campaigns

    def add_campaign(
        self, name: str, targeting: Targeting, *, account_id: int = DEFAULT_ACCOUNT_ID, now: datetime | None = None
    ) -> int:
        """Create an active campaign of the account (the default account's if none is named) if the account's plan
        has room for it, checked and written in one transaction; returns its id."""
        name = check_campaign_name(name)
        if not isinstance(targeting, Targeting):
            raise InvalidInput(f"targeting {targeting!r} is not a Targeting of locations and categories")
        params = {"name": name, "targeting": targeting_to_json(targeting), "now": now or datetime.now(UTC)}

        def work(tx: Transaction) -> int:
            account = self._lock_account(tx, account_id)
            self._check_room(tx, account, areas_for(targeting), targeting.locations, new_campaign=True)
            [(campaign_id,)] = tx.rows(sql.ADD_CAMPAIGN, **params, account_id=account.id)
            _keep_campaign_needs(tx, campaign_id, targeting)
            _count_needs(tx, [campaign_id], 1)
            _note_progress_due(tx, campaign_id)
            _note_needs_changed(tx)
            return campaign_id

        return self._transact(work)

    def campaign(self, campaign_id: int) -> Campaign:
        """The campaign with this id."""
        return self._transact(lambda tx: self._campaign_in(tx, campaign_id))

    def _campaign_in(self, tx: Transaction, campaign_id: int) -> Campaign:
        rows = tx.rows(
            f"SELECT {sql.CAMPAIGN_COLUMNS} FROM campaigns WHERE id = $id", id=check_id("campaign", campaign_id)
        )
        if not rows:
            raise not_found("campaign", campaign_id)
        return _campaign(rows[0])

    def campaigns(self, active_only: bool = False) -> list[Campaign]:
        """Every campaign, oldest first; only those whose search runs if ``active_only``."""
        statuses = ["active"] if active_only else list(CAMPAIGN_STATUSES)
        rows = self._transact(
            lambda tx: tx.rows(
                f"SELECT {sql.CAMPAIGN_COLUMNS} FROM campaigns WHERE status IN (SELECT unnest($statuses::TEXT[])) "
                "ORDER BY id",
                statuses=statuses,
            )
        )
        return [_campaign(row) for row in rows]

    def set_campaign_status(self, campaign_id: int, status: str) -> None:
        """Pause a campaign's imports and search, freeing what it held under its account's plan; or resume them,
        if the plan has room for the campaign again (checked and written in one transaction)."""
        if status not in CAMPAIGN_STATUSES:
            raise InvalidInput(f"status {status!r} is not allowed; allowed: {', '.join(CAMPAIGN_STATUSES)}")

        def work(tx: Transaction) -> None:
            # Pausing locks too: the status read under the lock says whether the campaign's pairs are counted.
            campaign, account = self._lock_campaign_account(tx, self._campaign_in(tx, campaign_id))
            if status == "active" and campaign.status != "active":
                locations = campaign.targeting.locations
                self._check_room(tx, account, areas_for(campaign.targeting), locations, new_campaign=True)
            # No RETURNING: DuckDB runs UPDATE ... RETURNING as a delete and an insert, which the foreign key from
            # the campaign's businesses refuses.
            tx.run(sql.SET_CAMPAIGN_STATUS, status=status, id=campaign.id)
            if campaign.status != status:
                _count_needs(tx, [campaign.id], 1 if status == "active" else -1)
            if status == "active":
                _note_progress_due(tx, campaign.id)
            else:
                _forget_progress(tx, [campaign.id])
            _note_needs_changed(tx)

        self._transact(work)

    def add_campaign_location(self, campaign_id: int, location: Location) -> Campaign:
        """Add a point or a country to a campaign's targeting: its next imports and searches look there too."""
        if not isinstance(location, PointLocation | CountryLocation):
            raise InvalidInput(f"location {location!r} is not a point with a radius nor a country")

        def work(tx: Transaction) -> Campaign:
            # The account's lock also makes two locations added to the campaign at once go one after the other,
            # so that neither is lost.
            campaign, account = self._lock_campaign_account(tx, self._campaign_in(tx, campaign_id))
            if location in campaign.targeting.locations:
                raise InvalidInput(f"campaign {campaign_id} already targets this location; `campaign show` lists them")
            targeting = Targeting((*campaign.targeting.locations, location), campaign.targeting.categories)
            added = Targeting((location,), targeting.categories)
            if campaign.status == "active":
                # A paused campaign holds nothing: it is checked against the plan when it is resumed.
                self._check_room(tx, account, areas_for(added), (location,), new_campaign=False)
            tx.run(
                "UPDATE campaigns SET targeting = $targeting WHERE id = $id",
                targeting=targeting_to_json(targeting),
                id=campaign.id,
            )
            new_areas = _keep_campaign_areas(tx, campaign.id, added)
            if campaign.status == "active" and new_areas:
                _count_needs(tx, [campaign.id], 1, areas=new_areas)
                _note_progress_due(tx, campaign.id)
            _note_needs_changed(tx)
            return replace(campaign, targeting=targeting)

        return self._transact(work)

    def campaign_accounts(self, campaign_ids: Iterable[int]) -> dict[int, CampaignAccount]:
        """The account of each of these campaigns, and whether the campaign is active (or paused, and why)."""
        ids = sorted({check_id("campaign", i) for i in campaign_ids})
        rows = self._transact(lambda tx: tx.rows(sql.CAMPAIGN_ACCOUNTS, campaign_ids=ids))
        return {
            campaign_id: CampaignAccount(campaign_id, Account(*account), status, reason)
            for campaign_id, *account, status, reason in rows
        }

    # Accounts and plans ------------------------------------------------------------------------------------
    #
    # Whatever may grow what an account's active campaigns hold (a campaign added, a location added to an active
    # one, a campaign resumed) locks the account's row first, checks the plan and writes in the same transaction:
    # concurrent writers to one account are checked one after the other and never take it past a limit together.
    # Locking the account before any campaign row keeps PostgreSQL's locks in one order, so none deadlock.

    def add_account(self, name: str, plan: str, *, now: datetime | None = None) -> int:
        """Create an account on one of the plans in force; returns its id."""
        name = check_account_name(name)
        plan_named(plan)
        params = {"name": name, "plan": plan, "now": now or datetime.now(UTC)}

        def work(tx: Transaction) -> int:
            rows = tx.rows(sql.ADD_ACCOUNT, **params)
            if not rows:
                raise InvalidInput(f"account name {name!r} is taken; `nakodo account list` shows the accounts")
            return rows[0][0]

        return self._transact(work)

    def account(self, account_id: int) -> Account:
        """The account with this id."""
        return self._transact(lambda tx: self._account_in(tx, account_id))

    def accounts(self) -> list[AccountUsage]:
        """Every account, oldest first, with what its active campaigns hold."""
        return self._transact(lambda tx: self._usages(tx, None))

    def account_usage(self, account_id: int) -> AccountUsage:
        """The account, what its active campaigns hold and how many of its campaigns its plan paused."""
        usages = self._transact(lambda tx: self._usages(tx, check_id("account", account_id)))
        if not usages:
            raise not_found("account", account_id)
        return usages[0]

    def set_account_plan(self, account_id: int, plan: str, *, now: datetime | None = None) -> dict[int, str]:
        """Move the account to another plan (or apply its own plan's limits again after the plans changed).

        If its active campaigns no longer fit, the newest are paused until the rest does, each with a reason the
        user sees, and the sensors are told. Returns the paused campaigns' reasons by id.
        """
        new_plan = plan_named(plan)
        day = f"{now or datetime.now(UTC):%Y-%m-%d}"

        def work(tx: Transaction) -> dict[int, str]:
            account = self._lock_account(tx, account_id)
            tx.run(sql.SET_ACCOUNT_PLAN, plan=new_plan.name, account_id=account.id)
            over = {} if new_plan.limits_nothing else campaigns_to_pause(new_plan, self._holding(tx, account.id))
            reasons = {
                campaign_id: f"account {account.name!r} moved to plan {new_plan.name} on {day}, which allows {limits}; "
                f"`nakodo campaign resume {campaign_id}` once the plan has room"
                for campaign_id, limits in over.items()
            }
            if reasons:
                tx.run(sql.PAUSE_FOR_PLAN, campaign_ids=list(reasons), reasons=list(reasons.values()))
                _count_needs(tx, list(reasons), -1)
                _forget_progress(tx, reasons)
                _note_needs_changed(tx)
            return reasons

        return self._transact(work)

    def _account_in(self, tx: Transaction, account_id: int) -> Account:
        rows = tx.rows(
            f"SELECT {sql.ACCOUNT_COLUMNS} FROM accounts WHERE id = $account_id",
            account_id=check_id("account", account_id),
        )
        if not rows:
            raise not_found("account", account_id)
        return Account(*rows[0])

    def _lock_account(self, tx: Transaction, account_id: int) -> Account:
        """Lock the account's row until commit (see above) and read it."""
        tx.run(sql.LOCK_ACCOUNT, account_id=check_id("account", account_id))
        return self._account_in(tx, account_id)

    def _lock_campaign_account(self, tx: Transaction, campaign: Campaign) -> tuple[Campaign, Account]:
        """Lock the campaign's account, then read the campaign again: its status and locations as of the lock."""
        account = self._lock_account(tx, campaign.account_id)
        return self._campaign_in(tx, campaign.id), account

    @staticmethod
    def _holding(tx: Transaction, account_id: int) -> dict[int, list[str]]:
        """The areas each of the account's active campaigns needs, by campaign."""
        held: dict[int, list[str]] = {}
        for campaign_id, area in tx.rows(sql.ACCOUNT_HOLDING, account_id=account_id):
            areas = held.setdefault(campaign_id, [])
            # A campaign without kept areas (the outer join's NULL) still counts as an active campaign.
            if area is not None:
                areas.append(area)
        return held

    def _check_room(
        self,
        tx: Transaction,
        account: Account,
        areas: Iterable[str],
        locations: Sequence[Location],
        *,
        new_campaign: bool,
    ) -> None:
        """Refuse what would take the locked account past its plan: ``areas`` (needed by ``locations``) and, if
        ``new_campaign``, one more active campaign. InvalidInput says which limit, what is needed and what is left."""
        plan = plan_named(account.plan)
        if plan.limits_nothing:
            # Nothing to count: the default account's thousands of campaigns are not read on every add.
            return
        held = Holding.of(self._holding(tx, account.id))
        subject = "this campaign" if new_campaign else "this location"
        campaign_plans = [name for name, other in configured_plans().items() if other.campaigns != 0]
        why = refusal(
            plan,
            held,
            areas,
            new_campaign=new_campaign,
            subject=subject,
            what=locations_in_words(locations),
            campaign_plans=campaign_plans,
        )
        if why:
            raise InvalidInput(f"{why} (account {account.id}, {account.name!r}; `nakodo account show {account.id}`)")

    @staticmethod
    def _usages(tx: Transaction, account_id: int | None) -> list[AccountUsage]:
        rows = tx.rows(sql.ACCOUNT_USAGE, everyone=account_id is None, account_id=account_id or 0)
        return [
            AccountUsage(Account(id_, name, plan, created_at), Usage(campaigns, areas, countries), paused)
            for id_, name, plan, created_at, campaigns, areas, countries, paused in rows
        ]

    # Searches ----------------------------------------------------------------------------------------------

    def add_campaign_businesses(self, campaign_id: int, now: datetime) -> tuple[int, int]:
        """Search the campaign: add the businesses of the pairs loaded since its last search (all of them the
        first time, or after its targeting changed); returns (added, total).

        ``now`` is when the search began: it vouches for what was stamped up to COMMIT_OVERLAP before, so that an
        import committing while it runs is read by the next search. With nothing new this is three short
        statements, whatever the campaign holds.
        """
        campaign_id = check_id("campaign", campaign_id)

        def work(tx: Transaction) -> tuple[int, int]:
            for statement in self._SEARCH_SETUP:
                tx.run(statement, campaign_id=campaign_id)
            state = tx.rows(sql.SEARCH_STATE, campaign_id=campaign_id)
            if not state:
                raise not_found("campaign", campaign_id)
            [(targeting_text, searched_targeting, searched_through, businesses)] = state
            everything = searched_through is None or searched_targeting != targeting_text or businesses is None
            since = _EVER if everything else searched_through
            landed = tx.rows(sql.LANDED_PAIRS, campaign_id=campaign_id, since=since, requested=REQUESTED)
            # Counted in full only when the search is: a big campaign's count is most of a search with nothing new.
            # Only searches add businesses, one at a time per campaign: what it holds now plus what this one adds
            # is its total.
            held = tx.rows(sql.COUNT_BUSINESSES, campaign_id=campaign_id)[0][0] if everything else businesses
            targeting = targeting_from_json(targeting_text)
            # A search that reads everything into a campaign holding nothing is its first: the big copy.
            fills = everything and not held
            added = self._add_found(tx, campaign_id, targeting, landed, now, held > 0, fills) if landed else 0
            total = held + added
            tx.run(
                sql.RECORD_SEARCH,
                campaign_id=campaign_id,
                now=now,
                through=now - COMMIT_OVERLAP,
                targeting=targeting_text,
                businesses=total,
                landed=max((imported_at for *_, imported_at in landed), default=None),
            )
            return added, total

        return self._transact(work)

    def _add_found(
        self,
        tx: Transaction,
        campaign_id: int,
        targeting: Targeting,
        pairs: list[tuple],
        now: datetime,
        holds: bool,
        fills: bool,
    ) -> int:
        points = [loc for loc in targeting.locations if isinstance(loc, PointLocation)]
        countries = [loc.country_code for loc in targeting.locations if isinstance(loc, CountryLocation)]
        params: dict[str, Any] = {
            "areas": [area for area, _, _ in pairs],
            "categories": [category for _, category, _ in pairs],
            "categories_by_rank": _ranked_categories(targeting),
            "countries": countries,
            "campaign_id": campaign_id,
            "now": now,
        }
        for number, point in enumerate(points):
            params |= sql.point_parameters(number, point.lat, point.lng, float(point.radius_km))
        statement = functools.partial(
            sql.add_found_businesses, len(points), bool(countries), holds, self._FIRST_PER_PLACE
        )
        return self._insert_found(tx, statement, params, fills)

    def _insert_found(self, tx: Transaction, statement: Callable[..., str], params: dict[str, Any], fills: bool) -> int:
        """Run a search's insert, ``statement()`` (``sql.add_found_businesses`` but for its ``share``), in ``tx``.

        ``fills`` when the search reads all the campaign's places and the campaign holds none: its first search, a
        copy of every place it wants. Such a search that fails leaves the campaign to read everything again."""
        return tx.written(statement(), **params)

    def search_progress(self, now: datetime, campaign_ids: Sequence[int] | None = None) -> list[SearchProgress]:
        """Every active campaign's (or exactly these campaigns') areas by import state at ``now``, when real data
        last landed, and its search's times: one statement, whatever the number of campaigns."""
        rows = self._transact(lambda tx: tx.rows(sql.SEARCH_PROGRESS, **_rule(now), **_campaign_filter(campaign_ids)))
        return [SearchProgress(*row) for row in rows]

    def count_progress(self, now: datetime) -> ProgressCount:
        """Bring the kept progress of every active campaign up to date at ``now`` and read the campaigns whose
        search may be due (a superset of ``search_sensor.due_reason``'s): moved by the pairs that changed since the
        last count, and counted whole for the campaigns whose needs changed, so that a count costs what changed,
        not the fleet. ``kept_progress`` reads it all."""

        def work(tx: Transaction) -> ProgressCount:
            recount = self._recount_coverage(tx, now)
            [(active,)] = tx.rows(sql.KEPT_PROGRESS_SIZE)
            rows = tx.rows(
                sql.MAYBE_DUE_PROGRESS,
                in_flight_after=now - SEARCH_IN_FLIGHT,
                new_day_before=now - timedelta(hours=SEARCH_WINDOW_HOURS),
                waiting_after=now - timedelta(hours=IMPORT_WAIT_HOURS),
                again_before=now - timedelta(minutes=SEARCH_AGAIN_MINUTES),
            )
            return ProgressCount([SearchProgress(*row) for row in rows], active, recount.campaign_areas)

        return self._transact(work)

    def kept_progress(self) -> list[SearchProgress]:
        """Every active campaign's progress as last kept (``count_progress``): what ``search_progress`` computes
        from the campaigns' pairs, as of that count."""
        return [SearchProgress(*row) for row in self._transact(lambda tx: tx.rows(sql.KEPT_PROGRESS))]

    def request_searches(self, campaign_ids: Iterable[int], new_windows: Iterable[int], now: datetime) -> None:
        """Note that these campaigns' searches were asked for at ``now``; those in ``new_windows`` begin a new
        day's window of searches then."""
        ids = sorted({check_id("campaign", i) for i in campaign_ids})
        if ids:
            windows = sorted({check_id("campaign", i) for i in new_windows})
            self._transact(lambda tx: tx.run(sql.REQUEST_SEARCHES, campaign_ids=ids, new_windows=windows, now=now))

    def campaign_points(self, campaign_id: int, limit: int) -> list[tuple[float, float]]:
        """(lat, lng) of the campaign's ``limit`` nearest businesses, nearest first."""
        return self._transact(
            lambda tx: tx.rows(sql.CAMPAIGN_POINTS, campaign_id=check_id("campaign", campaign_id), limit=limit)
        )

    # ----------------------------------------------------------------------------------------------- Searches

    def campaign_results(self, campaign_id: int) -> list[dict[str, Any]]:
        """The campaign's businesses, nearest first (country-only matches last), websites and phones as lists."""

        def work(tx: Transaction) -> list[tuple]:
            self._campaign_in(tx, campaign_id)
            return tx.rows(sql.CAMPAIGN_RESULTS, campaign_id=campaign_id)

        return [_result(row) for row in self._transact(work)]

    # Place names

    def place_name(self, query: str) -> PlaceName | None:
        """What a place name was resolved to when it was first looked up, or None if it never was."""
        rows = self._transact(
            lambda tx: tx.rows(f"SELECT {sql.PLACE_NAME_COLUMNS} FROM place_names WHERE query = $query", query=query)
        )
        return PlaceName(*rows[0]) if rows else None

    def remember_place_name(self, place: PlaceName) -> PlaceName:
        """Keep what a name was resolved to; if another caller kept the same name first, theirs stands."""

        def work(tx: Transaction) -> tuple:
            tx.run(
                f"INSERT INTO place_names ({sql.PLACE_NAME_COLUMNS}) "
                "VALUES ($query, $display_name, $lat, $lng, $looked_up_at) ON CONFLICT (query) DO NOTHING",
                **asdict(place),
            )
            return tx.rows(f"SELECT {sql.PLACE_NAME_COLUMNS} FROM place_names WHERE query = $query", query=place.query)[
                0
            ]

        return PlaceName(*self._transact(work))
