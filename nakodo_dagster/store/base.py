"""The store behind campaigns and imports, written once for DuckDB and PostgreSQL.

``Store`` is the face the rest of the project uses: each method checks what it is given and runs one concern's
work (``marks``, ``admission``, ``imports``, ``coverage``, ``campaigns``, ``accounts``, ``search``, ...) in one
short transaction of its backend (``_transact``). No method holds a transaction across calls, nor across a call to
another service.
"""

from __future__ import annotations

import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa

from nakodo_dagster.drift import DriftLimits
from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.releases import check_release_name
from nakodo_dagster.placement import (
    REQUESTED,
    CountryLocation,
    ImportRun,
    Location,
    PlaceImport,
    PointLocation,
    Targeting,
    check_categories,
    parse_area_key,
)
from nakodo_dagster.plan_config import plan_named
from nakodo_dagster.store import (
    accounts,
    admission,
    campaigns,
    carry,
    coverage,
    drift_gate,
    imports,
    marks,
    migrate,
    needs,
    place_names,
    progress,
    search,
)
from nakodo_dagster.store.models import (
    CAMPAIGN_STATUSES,
    DEFAULT_ACCOUNT_ID,
    Account,
    AccountUsage,
    Campaign,
    CampaignAccount,
    CampaignLine,
    Coverage,
    HeldImport,
    ImportStatus,
    NewCampaign,
    PlaceName,
    ProgressCount,
    ReleasePairs,
    Reservation,
    RollOut,
    SearchProgress,
    WrittenImport,
    check_account_name,
    check_campaign_name,
    check_id,
    not_found,
)
from nakodo_dagster.store.shared import campaign_filter
from nakodo_dagster.store.transaction import T, Transaction, pair_params


def _new_campaign(name: str, account_id: int, targeting: Targeting) -> NewCampaign:
    """The campaign checked as anything a user types: its name, its account's id and its targeting."""
    if not isinstance(targeting, Targeting):
        raise InvalidInput(f"targeting {targeting!r} is not a Targeting of locations and categories")
    return NewCampaign(check_campaign_name(name), check_id("account", account_id), targeting)


def store_identity(kind: str, *where: str) -> str:
    """``Store.identity`` of a store of ``kind`` found at ``where``."""
    return hashlib.sha1("\n".join((kind, *where)).encode()).hexdigest()[:16]


def _check_release(release: str) -> None:
    if not isinstance(release, str) or not release or release == REQUESTED:
        raise InvalidInput(f"release {release!r} is not allowed: use an Overture release name, e.g. 2026-11-18.0")


class Store(ABC):
    """place_imports, places, campaigns and campaign_businesses, in one database."""

    # Serialises migrators that reach the database at the same moment; None where the backend already does.
    _MIGRATION_LOCK: str | None = None
    # Run first in a campaign's search ($campaign_id): where two searches of one campaign can overlap, they take
    # turns, so that the second sees what the first added and inserts no business twice.
    _SEARCH_SETUP: tuple[str, ...] = ()
    # How a search keeps one row per place (search.add_found_businesses).
    _FIRST_PER_PLACE = search.FIRST_BY_WINDOW
    # Statements this backend alone runs after a migration's own, by version.
    _MIGRATIONS_OF_ITS_OWN: Mapping[int, tuple[str, ...]] = {}

    @abstractmethod
    def _transact(self, work: Callable[[Transaction], T]) -> T:
        """Run ``work`` in one short transaction: committed if it returns, rolled back if it raises."""

    @contextmanager
    def held(self) -> Iterator[None]:
        """The database kept open for a block of calls, each still its own transaction (a sensor tick's): what
        the backend opens once for them rather than once each. PostgreSQL connects per transaction either way."""
        yield

    @property
    @abstractmethod
    def identity(self) -> str:
        """Which database this is, as a short hash of where it is (never of a user name or password): two stores
        sharing one Dagster instance tell their runs apart by it."""

    # Schema

    def migrate(self) -> None:
        """Create or upgrade the tables to the newest schema; safe to repeat and to run from many processes."""
        while not self._transact(lambda tx: migrate.migrate(tx, self._MIGRATION_LOCK, self._MIGRATIONS_OF_ITS_OWN)):
            pass

    # The freshness table

    def import_rows(self, areas: Iterable[str], categories: Iterable[str]) -> list[PlaceImport]:
        """What place_imports says about every (area, category) pair of these areas and categories."""
        return self._transact(lambda tx: imports.import_rows(tx, sorted(set(areas)), sorted(set(categories))))

    def force_request(self, pairs: Iterable[tuple[str, str]], now: datetime) -> datetime:
        """The analyst's override: mark pairs as requested whatever their age; returns the marks' stamp."""
        params = pair_params(pairs)
        if params["areas"]:
            self._transact(lambda tx: marks.mark(tx, params, now, now, force=True))
        return now

    def take_back(self, pairs: Iterable[tuple[str, str]], stamp: datetime) -> int:
        """Delete this caller's unused marks (its exact stamp) so the next look asks again; returns how many."""
        params = pair_params(pairs)
        if not params["areas"]:
            return 0
        return self._transact(lambda tx: marks.take_back(tx, params, stamp))

    def mark_failed(self, pairs: Iterable[tuple[str, str]], stamp: datetime, now: datetime, reason: str) -> int:
        """Record that a failed import's own marks (its exact ``stamp``) failed at ``now``, and why: they read as
        failed at once, so campaigns stop waiting, and are asked for again RETRY_DAYS after ``now``. Returns how
        many marks were recorded as failed (a mark already failed, or replaced by another, is left as it is)."""
        params = pair_params(pairs)
        if not params["areas"]:
            return 0
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidInput("a failed import needs a reason in words, e.g. 'file part-00003.parquet is unreadable'")
        return self._transact(lambda tx: marks.mark_failed(tx, params, stamp, now, reason.strip()))

    def needs_changed_since(self, since: datetime, now: datetime) -> bool:
        """Whether a pair may have become missing after ``since``: a noted change (a campaign added or changed,
        a mark taken back or failed), or a release or a failed mark aging past its boundary."""
        return self._transact(lambda tx: needs.changed_since(tx, since, now))

    # Asking for imports

    def reserve_missing(
        self, now: datetime, max_runs: int, campaign_ids: Sequence[int] | None = None, *, relook: bool = True
    ) -> Reservation:
        """Mark the missing pairs of at most ``max_runs`` import runs, in the database, and group what we got.

        ``relook`` finds the missing pairs again: the campaigns' kept areas and categories (every active
        campaign, or the active ones of ``campaign_ids``) anti-joined with place_imports under the one freshness
        rule, lined up in fair-share order (``admission.line_up``: accounts take turns, each campaign's first
        block before the rest). For the whole fleet, only in the blocks whose pairs changed since the last look
        (the coverage count notes them); its demand and its line are kept, so that without ``relook`` a tick
        admits from the line's head and finds again only the admitted blocks' missing pairs. The runs come back in
        line order, the counts before admission. ``max_runs=0`` reserves nothing and only counts. Campaigns their
        account's plan paused are left out, as every paused one is, and counted.
        """
        if max_runs < 0:
            raise InvalidInput(f"max_runs {max_runs!r} is not allowed: use 0 or more")
        chosen = campaign_filter(campaign_ids)
        found = self._transact(lambda tx: admission.reserve(tx, now, max_runs, chosen, relook=relook))
        return admission.reservation(now, found)

    def coverage(self, now: datetime, listed: int) -> Coverage:
        """The pairs active campaigns need, by the one freshness rule at ``now``: counted per state, and at most
        ``listed`` of each state (0 lists none), oldest first. Pairs no campaign needs are left out.

        The counts are kept, and each count works out again only the pairs that may have changed since the one
        before (``recount_coverage``): what it costs grows with what changed, not with the campaigns.
        """
        if listed < 0:
            raise InvalidInput(f"listed {listed!r} is not allowed: use 0 or more")
        return self._transact(lambda tx: coverage.coverage(tx, now, listed))

    def recount_coverage(self, now: datetime) -> int:
        """Work out again the state of every needed pair that may have changed since the last count (every pair
        with a place_imports row on the first count, or when ``now`` is before the last count's); returns how
        many pairs were looked at."""
        return self._transact(lambda tx: coverage.recount(tx, now).pairs)

    def marks_awaiting_run(self, now: datetime) -> dict[datetime, int]:
        """The stamps of marks whose run should exist by now (past the launch grace, not yet failed), and how
        many marks carry each."""
        return self._transact(lambda tx: marks.awaiting_run(tx, now))

    def marks_stamped(self, stamp: datetime) -> list[tuple[str, str]]:
        """The pairs whose mark carries exactly this stamp."""
        return self._transact(lambda tx: marks.stamped_pairs(tx, stamp))

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
        params = pair_params(run.pairs)
        if not params["areas"]:
            return WrittenImport({}, {})
        incoming = imports.incoming(places)
        return self._transact(lambda tx: imports.write(tx, run, params, release, incoming, now, stamp, gate, accept))

    def read_from(self, pairs: Iterable[tuple[str, str]], release: str) -> list[tuple[str, str]]:
        """Those of ``pairs`` whose places came from ``release`` (kept while a mark or a failure stands)."""
        params = pair_params(pairs)
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
        params = pair_params(pairs)
        if not params["areas"]:
            return WrittenImport({}, {})
        removed = sorted(set(removed))
        return self._transact(lambda tx: carry.carry_over(tx, params, release, base, removed, now, stamp))

    def forget_failed_import(self, area: str, category: str, now: datetime) -> PlaceImport | None:
        """The analyst's override of the 7-day block: delete the pair's failed mark, so the next look asks again.

        Returns the mark deleted, or None when the pair had no failed mark to forget (never asked for, an import
        on its way, or a real release loaded): those stay as they are.
        """
        area = parse_area_key(area).key
        (category,) = check_categories([category])
        return self._transact(lambda tx: marks.forget_failed(tx, area, category, now))

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
        return self._transact(lambda tx: imports.import_status(tx, now))

    def roll_out(self, release: str, *, campaign_id: int | None = None, category: str | None = None) -> int:
        """The analyst's roll-out: ask the loaded pairs active campaigns need (of the campaign, of the category, or
        all of them) to move to ``release`` now, whatever their age; returns how many were asked. The import sensor
        asks for them at its next ticks like any missing pair (placement.rolled_out). InvalidInput, with nothing
        written, for a release name, a campaign or a category that cannot be, or a paused campaign."""
        check_release_name(release)
        if category is not None:
            (category,) = check_categories([category])
        if campaign_id is not None and self.campaign(check_id("campaign", campaign_id)).status != "active":
            raise InvalidInput(
                f"campaign {campaign_id} is paused, and nothing is imported for a paused campaign: resume it first"
            )
        return self._transact(lambda tx: marks.roll_out(tx, release, campaign_id, category))

    def roll_out_status(self, release: str, now: datetime) -> RollOut:
        """How far ``release`` has reached: the pairs holding places that come from it, out of all that hold places,
        those asked to move to it now, and when the last of the rest moves at the FRESH_DAYS pace."""
        check_release_name(release)
        return self._transact(lambda tx: imports.roll_out_status(tx, release, now))

    def release_pairs(self) -> list[ReleasePairs]:
        """Each release the pairs' places come from, newest first: how many pairs, and how many of its pairs the
        drift gate holds."""
        return self._transact(imports.release_pairs)

    def import_line(self, now: datetime, campaign_ids: Sequence[int] | None = None) -> tuple[int, list[CampaignLine]]:
        """How many blocks wait in the kept fair-share line, and where each active campaign (or each named)
        stands in it."""
        chosen = campaign_filter(campaign_ids)
        return self._transact(lambda tx: admission.import_line(tx, now, chosen))

    # Campaigns

    def add_campaign(
        self, name: str, targeting: Targeting, *, account_id: int = DEFAULT_ACCOUNT_ID, now: datetime | None = None
    ) -> int:
        """Create an active campaign of the account (the default account's if none is named) if the account's plan
        has room for it, checked and written in one transaction; returns its id."""
        campaign = _new_campaign(name, account_id, targeting)
        return self._transact(lambda tx: campaigns.add(tx, campaign, now or datetime.now(UTC)))

    def add_campaigns(
        self,
        new: Sequence[NewCampaign],
        *,
        now: datetime | None = None,
        check_only: bool = False,
        written: Callable[[int], None] | None = None,
    ) -> list[int]:
        """Create these active campaigns, all or none, in one transaction: each is checked as ``add_campaign``
        checks one, against its account's plan counting what the account holds and the campaigns of the account
        before it here. CampaignsRefused names every refused campaign, by its place in ``new``, and nothing is
        written. ``check_only`` checks them and writes nothing. The write goes in batches, ``written`` told how many
        after each. Returns their ids, in the order given. Many campaigns at once outgrow the planner's statistics:
        ``refresh_campaign_statistics`` after it."""
        new = [_new_campaign(c.name, c.account_id, c.targeting) for c in new]
        if not new:
            return []
        return self._transact(
            lambda tx: campaigns.add_many(tx, new, now or datetime.now(UTC), check_only=check_only, written=written)
        )

    def keep_statistics(self) -> list[str]:
        """Analyze the store's tables written to by more than autovacuum's rule allows since they were last analyzed,
        and return their names: a tick planned over a table never analyzed took minutes instead of seconds, and
        autovacuum may be off or not come round before the next tick. Every sensor tick starts with it."""
        return []

    def refresh_campaign_statistics(self) -> None:
        """Bring the planner's statistics of the tables campaigns are written into up to date, after many campaigns
        were written at once: a tick planned on an empty table's statistics can take minutes instead of seconds."""
        self._transact(lambda tx: tx.analyze(*campaigns.CAMPAIGN_TABLES))

    def campaign(self, campaign_id: int) -> Campaign:
        """The campaign with this id."""
        return self._transact(lambda tx: campaigns.campaign_in(tx, campaign_id))

    def campaigns(self, active_only: bool = False) -> list[Campaign]:
        """Every campaign, oldest first; only those whose search runs if ``active_only``."""
        statuses = ["active"] if active_only else list(CAMPAIGN_STATUSES)
        rows = self._transact(lambda tx: tx.rows(campaigns.CAMPAIGNS, statuses=statuses))
        return [campaigns.campaign(row) for row in rows]

    def set_campaign_status(self, campaign_id: int, status: str) -> None:
        """Pause a campaign's imports and search, freeing what it held under its account's plan; or resume them,
        if the plan has room for the campaign again (checked and written in one transaction)."""
        if status not in CAMPAIGN_STATUSES:
            raise InvalidInput(f"status {status!r} is not allowed; allowed: {', '.join(CAMPAIGN_STATUSES)}")
        self._transact(lambda tx: campaigns.set_status(tx, campaign_id, status))

    def add_campaign_location(self, campaign_id: int, location: Location) -> Campaign:
        """Add a point or a country to a campaign's targeting: its next imports and searches look there too."""
        if not isinstance(location, PointLocation | CountryLocation):
            raise InvalidInput(f"location {location!r} is not a point with a radius nor a country")
        return self._transact(lambda tx: campaigns.add_location(tx, campaign_id, location))

    def campaign_accounts(self, campaign_ids: Iterable[int]) -> dict[int, CampaignAccount]:
        """The account of each of these campaigns, and whether the campaign is active (or paused, and why)."""
        ids = sorted({check_id("campaign", i) for i in campaign_ids})
        return self._transact(lambda tx: campaigns.campaign_accounts(tx, ids))

    # Accounts and plans (``accounts``: what locks an account and why)

    def add_account(self, name: str, plan: str, *, now: datetime | None = None) -> int:
        """Create an account on one of the plans in force; returns its id."""
        name = check_account_name(name)
        plan_named(plan)
        return self._transact(lambda tx: accounts.add(tx, name, plan, now or datetime.now(UTC)))

    def account(self, account_id: int) -> Account:
        """The account with this id."""
        return self._transact(lambda tx: accounts.account_in(tx, account_id))

    def accounts(self) -> list[AccountUsage]:
        """Every account, oldest first, with what its active campaigns hold."""
        return self._transact(lambda tx: accounts.usages(tx, None))

    def account_usage(self, account_id: int) -> AccountUsage:
        """The account, what its active campaigns hold and how many of its campaigns its plan paused."""
        usages = self._transact(lambda tx: accounts.usages(tx, check_id("account", account_id)))
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
        return self._transact(lambda tx: accounts.set_plan(tx, account_id, new_plan, day))

    # Searches

    def add_campaign_businesses(self, campaign_id: int, now: datetime) -> tuple[int, int]:
        """Search the campaign: add the businesses of the pairs loaded since its last search (all of them the
        first time, or after its targeting changed); returns (added, total).

        ``now`` is when the search began: it vouches for what was stamped up to COMMIT_OVERLAP before, so that an
        import committing while it runs is read by the next search. With nothing new this is three short
        statements, whatever the campaign holds.
        """
        campaign_id = check_id("campaign", campaign_id)
        return self._transact(
            lambda tx: search.add_businesses(
                tx,
                campaign_id,
                now,
                setup=self._SEARCH_SETUP,
                first=self._FIRST_PER_PLACE,
                insert=self._insert_found,
            )
        )

    def _insert_found(self, tx: Transaction, statement: Callable[..., str], params: dict[str, Any], fills: bool) -> int:
        """Run a search's insert, ``statement()`` (``search.add_found_businesses`` but for its ``share``), in
        ``tx``.

        ``fills`` when the search reads all the campaign's places and the campaign holds none: its first search, a
        copy of every place it wants. Such a search that fails leaves the campaign to read everything again."""
        return tx.written(statement(), **params)

    def search_progress(self, now: datetime, campaign_ids: Sequence[int] | None = None) -> list[SearchProgress]:
        """Every active campaign's (or exactly these campaigns') areas by import state at ``now``, when real data
        last landed, and its search's times: one statement, whatever the number of campaigns."""
        chosen = campaign_filter(campaign_ids)
        return self._transact(lambda tx: progress.search_progress(tx, now, chosen))

    def count_progress(self, now: datetime) -> ProgressCount:
        """Bring the kept progress of every active campaign up to date at ``now`` and read the campaigns whose
        search may be due (a superset of ``search_sensor.due_reason``'s): moved by the pairs that changed since the
        last count, and counted whole for the campaigns whose needs changed, so that a count costs what changed,
        not the fleet."""
        return self._transact(lambda tx: search.count_progress(tx, now))

    def request_searches(self, campaign_ids: Iterable[int], new_windows: Iterable[int], now: datetime) -> None:
        """Note that these campaigns' searches were asked for at ``now``; those in ``new_windows`` begin a new
        day's window of searches then."""
        ids = sorted({check_id("campaign", i) for i in campaign_ids})
        if ids:
            windows = sorted({check_id("campaign", i) for i in new_windows})
            self._transact(lambda tx: tx.run(search.REQUEST_SEARCHES, campaign_ids=ids, new_windows=windows, now=now))

    def campaign_points(self, campaign_id: int, limit: int) -> list[tuple[float, float, bool, bool]]:
        """(lat, lng, removed from Overture, closed for good) of the campaign's ``limit`` nearest businesses, nearest
        first."""
        return self._transact(
            lambda tx: tx.rows(search.CAMPAIGN_POINTS, campaign_id=check_id("campaign", campaign_id), limit=limit)
        )

    def campaign_results(self, campaign_id: int) -> list[dict[str, Any]]:
        """The campaign's businesses, nearest first (country-only matches last), websites and phones as lists."""

        def work(tx: Transaction) -> list[tuple]:
            campaigns.campaign_in(tx, campaign_id)
            return tx.rows(search.CAMPAIGN_RESULTS, campaign_id=campaign_id)

        return [search.result(row) for row in self._transact(work)]

    # Place names

    def place_name(self, query: str) -> PlaceName | None:
        """What a place name was resolved to when it was first looked up, or None if it never was."""
        return self._transact(lambda tx: place_names.place_name(tx, query))

    def remember_place_name(self, place: PlaceName) -> PlaceName:
        """Keep what a name was resolved to; if another caller kept the same name first, theirs stands."""
        return self._transact(lambda tx: place_names.remember(tx, place))
