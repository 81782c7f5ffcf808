"""The store in PostgreSQL, for production: many processes and machines at once."""

from __future__ import annotations

import contextlib
import io
import re
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from functools import cache, partial
from typing import Any

import psycopg2
import pyarrow as pa
import pyarrow.csv

from nakodo_dagster.redact import redacted_url
from nakodo_dagster.store.base import Store, store_identity
from nakodo_dagster.store.coverage import ANALYZE_COVERAGE_PAIRS, COVERAGE_PAIRS_ESTIMATE
from nakodo_dagster.store.schema import BUSINESS_PARTITIONS, POSTGRES_MIGRATIONS
from nakodo_dagster.store.search import FIRST_BY_DISTINCT_ON, POSTGRES_SHARE_OF_PLACES
from nakodo_dagster.store.transaction import T, Transaction

# A tick joins every campaign's pairs with place_imports: with the server's default 4 MB per sort or hash, that
# join of a few hundred thousand rows spills to disk and takes twice as long, and JIT compiling it costs
# seconds that a statement run once per tick never earns back.
_SESSION_OPTIONS = "-c timezone=UTC -c work_mem=64MB -c jit=off"
# Rows per COPY: bounds the CSV held in memory for a country-sized import.
_COPY_BATCH_ROWS = 50_000
# The sort by place id of a first search (600,000 places, search.FIRST_BY_DISTINCT_ON) fits in memory instead of
# spilling to disk.
_SEARCH_WORK_MEM = "SET LOCAL work_mem = '256MB'"
# Connections a campaign's first search spreads its insert over, one per partition of campaign_businesses, the
# places of that partition each (search.POSTGRES_SHARE_OF_PLACES): PostgreSQL runs no INSERT ... SELECT in parallel.
# On two cores, two took a first search of 644,095 businesses from 2.94 s to 2.2 s (medians of 7 in turn), when
# they still wrote one table; three, 1.2 times as long as two.
_SEARCH_CONNECTIONS = BUSINESS_PARTITIONS


@cache
def _pyformat(statement: str) -> str:
    """``$name`` placeholders as psycopg2's ``%(name)s``; a literal % is doubled."""
    return re.sub(r"\$([A-Za-z_]\w*)", r"%(\1)s", statement.replace("%", "%%"))


def _array_text(values: list) -> str:
    """A list in PostgreSQL's array syntax, sent as one string to cast.

    psycopg2 sends a list as ARRAY['a', 'b', ...], which the server parses as one expression per element: for the
    hundreds of thousands of pairs of a big tick, that parse alone took longer than the insert.
    """
    text = [str(value) for value in values]
    if any('"' in value or "\\" in value for value in text):
        text = [value.replace("\\", "\\\\").replace('"', '\\"') for value in text]
    return '{"' + '","'.join(text) + '"}' if text else "{}"


# The planner's own order of joins, or the written one (1); 8 is PostgreSQL's default for both.
_WRITTEN_ORDER = "SET LOCAL join_collapse_limit = {limit}; SET LOCAL from_collapse_limit = {limit}"
_COLLAPSE_LIMIT = 8

# PostgreSQL's defaults for autovacuum_analyze_scale_factor and autovacuum_analyze_threshold.
_ANALYZE_SCALE_FACTOR = 0.1
_ANALYZE_THRESHOLD = 50

# The store's own tables (not another session's temp tables) that autovacuum's rule says to analyze: rows written
# since the last ANALYZE, by anyone, beyond the threshold and the share of the rows then (-1: never analyzed).
_OUTGROWN_STATISTICS = f"""
SELECT stats.relname
FROM pg_stat_user_tables AS stats
JOIN pg_class ON pg_class.oid = stats.relid
WHERE stats.schemaname = current_schema()
  AND stats.n_mod_since_analyze > {_ANALYZE_THRESHOLD} + {_ANALYZE_SCALE_FACTOR} * greatest(pg_class.reltuples, 0)
ORDER BY stats.relname
"""
# Table names as the catalog gives the store's own: lower case, so they need no quoting.
_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")


class _PostgresTransaction(Transaction):
    def _translate(self, statement: str) -> str:
        return _pyformat(statement)

    def run(self, statement: str, **params: Any) -> None:
        super().run(statement, **{name: _array_text(v) if isinstance(v, list) else v for name, v in params.items()})

    def written(self, statement: str, **params: Any) -> int:
        self.run(statement, **params)
        return self._cursor.rowcount

    @contextlib.contextmanager
    def written_order(self) -> Iterator[None]:
        # The planner keeps explicit JOINs and subqueries where they are written: a fence (OFFSET 0) kept only its
        # subquery, and a guess of 71 active campaigns of 10,000 still drove a loop over every moving pair. SET LOCAL
        # ends with the transaction: a statement that fails here leaves nothing set for the next.
        self.run(_WRITTEN_ORDER.format(limit=1))
        yield
        self.run(_WRITTEN_ORDER.format(limit=_COLLAPSE_LIMIT))

    def analyze(self, *tables: str) -> None:
        # Temp tables have no statistics until analysed: without them the planner guesses their size from pages.
        self.run(f"ANALYZE {', '.join(tables)}")

    def keep_coverage_statistics(self, restated: int) -> None:
        # Autovacuum's own rule, without waiting up to a minute for its next look: the first count after a big
        # admission fills the table, and the search sensor's next tick, planned with an empty table's statistics,
        # counted 741 campaigns' progress in 76 s instead of 1.5 s at 10,000 campaigns.
        [(rows_when_analysed,)] = self.rows(COVERAGE_PAIRS_ESTIMATE)
        if restated > _ANALYZE_SCALE_FACTOR * max(rows_when_analysed, 0) + _ANALYZE_THRESHOLD:
            self.run(ANALYZE_COVERAGE_PAIRS)

    def load_incoming_places(self, places: pa.Table) -> None:
        options = pyarrow.csv.WriteOptions(include_header=False)
        for batch in places.to_batches(max_chunksize=_COPY_BATCH_ROWS):
            buffer = io.BytesIO()
            # Arrow writes a null as an empty field and an empty string as "": COPY's CSV reads them back so.
            pyarrow.csv.write_csv(pa.Table.from_batches([batch]), buffer, options)
            buffer.seek(0)
            self._cursor.copy_expert("COPY incoming_places FROM STDIN WITH (FORMAT csv)", buffer)


# SQLSTATEs of a server that went away or is not taking connections: the connection class (08), and an
# administrator's or a crash's shutdown and a server still starting (57P01-57P03). A query cancelled (57014) or a
# lock not granted is an answer, not an outage.
_OUTAGE_STATES = ("08", "57P01", "57P02", "57P03")


def store_unreachable(error: BaseException) -> bool:
    """Whether ``error``, or one of its causes, is the PostgreSQL store out of reach (a restart, a failover, a host
    lost) rather than an answer of it: a fault another try a little later fixes."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, psycopg2.InterfaceError):
            return True
        # No SQLSTATE: the driver's own words, a connection refused or cut.
        if isinstance(current, psycopg2.OperationalError) and (
            current.pgcode is None or current.pgcode.startswith(_OUTAGE_STATES)
        ):
            return True
        current = current.__cause__ or current.__context__
    return False


class PostgresStore(Store):
    """A PostgreSQL database, a connection per call: nothing is held between calls."""

    # Two first migrations at once would both create the same tables; the lock goes with the transaction.
    _MIGRATION_LOCK = "SELECT pg_advisory_xact_lock(7214311950)"
    # A lock per campaign (the two-key form: apart from the migration lock's), held to the commit.
    _SEARCH_SETUP = ("SELECT pg_advisory_xact_lock(72143119, $campaign_id)", _SEARCH_WORK_MEM)
    _FIRST_PER_PLACE = FIRST_BY_DISTINCT_ON
    _MIGRATIONS_OF_ITS_OWN = POSTGRES_MIGRATIONS

    def __init__(self, url: str) -> None:
        self.url = url

    def __repr__(self) -> str:
        return f"PostgresStore({redacted_url(self.url)!r})"

    @property
    def identity(self) -> str:
        # The server, the database and the session options (a schema on the search path is another store); the user
        # and the password name who connects, not which store, and never leave the process.
        dsn = psycopg2.extensions.parse_dsn(self.url)
        where = [dsn.get(key, "") for key in ("host", "hostaddr", "port", "dbname", "options")]
        return store_identity("postgresql", *where)

    def _connect(self) -> psycopg2.extensions.connection:
        """A new connection. libpq quotes a URL it cannot parse, password and all, in its error: the error raised
        here says the same with the password masked, and chains no original that would print it again."""
        try:
            return psycopg2.connect(self.url, options=_SESSION_OPTIONS)
        except psycopg2.Error as error:
            refused = error
        raise type(refused)(redacted_url(str(refused)))

    def _transact(self, work: Callable[[Transaction], T]) -> T:
        connection = self._connect()
        try:
            with connection.cursor() as cursor:
                result = work(_PostgresTransaction(cursor))
            connection.commit()
            return result
        except BaseException:
            # A server that went away also refuses the rollback: the error worth raising is the first one.
            with contextlib.suppress(psycopg2.Error):
                connection.rollback()
            raise
        finally:
            connection.close()

    def keep_statistics(self) -> list[str]:
        def analyze_outgrown(tx: Transaction) -> list[str]:
            tables = [name for (name,) in tx.rows(_OUTGROWN_STATISTICS) if _PLAIN_NAME.fullmatch(name)]
            if tables:
                # SKIP_LOCKED: a table autovacuum, or another sensor's tick, is analyzing is left to it.
                tx.run(f"ANALYZE (SKIP_LOCKED) {', '.join(tables)}")
            return tables

        return self._transact(analyze_outgrown)

    def _insert_found(self, tx: Transaction, statement: Callable[..., str], params: dict[str, Any], fills: bool) -> int:
        """A first search (``fills``) on ``_SEARCH_CONNECTIONS`` connections at once, ``tx``'s one of them: every
        share is written or the search fails."""
        if not fills:
            return super()._insert_found(tx, statement, params, fills)
        shared = statement(POSTGRES_SHARE_OF_PLACES)
        every_share_written = threading.Barrier(_SEARCH_CONNECTIONS)

        def write_share(part: int, share_tx: Transaction) -> int:
            share_tx.run(_SEARCH_WORK_MEM)
            added = share_tx.written(shared, **params, part=part, parts=_SEARCH_CONNECTIONS)
            # Committed only once every share is written. Should ``tx`` fail after that, the campaign's next search
            # reads everything again (``fills``) and finds these rows held.
            every_share_written.wait()
            return added

        def other_share(part: int) -> int:
            try:
                return self._transact(partial(write_share, part))
            except BaseException:
                every_share_written.abort()
                raise

        with ThreadPoolExecutor(_SEARCH_CONNECTIONS - 1, thread_name_prefix="search-share") as pool:
            others = [pool.submit(other_share, part) for part in range(1, _SEARCH_CONNECTIONS)]
            try:
                added = tx.written(shared, **params, part=0, parts=_SEARCH_CONNECTIONS)
                every_share_written.wait()
            except threading.BrokenBarrierError:
                for other in others:
                    other.result()  # the share's own error, which broke the barrier
                raise
            except BaseException:
                every_share_written.abort()
                raise
            # Waits for the other shares' commits: this transaction's commit, which records the search, follows.
            return added + sum(other.result() for other in others)
