"""The store's tables, as numbered migrations that DuckDB and PostgreSQL both accept word for word, and what
PostgreSQL alone adds to a version (``POSTGRES_MIGRATIONS``).

Append a new version to change the schema; never edit one that has shipped, because a database records
only the number it reached. Version 3's tables are filled for campaigns that existed before it by
``Store.migrate``, since their areas come from Python (``placement.areas_for``); version 4 gives them to the
default account in SQL.

``places.address`` is text as the reader gives it (one formatted line); when the reader hands a struct or a
list instead, the store keeps its JSON. ``websites`` and ``phones`` are JSON arrays of strings, as text.
"""

from __future__ import annotations

_BUSINESS_COLUMNS = (
    "campaign_id, place_id, name, category, lat, lng, distance_km, address, websites, phones, country, added_at"
)

BUSINESS_PARTITIONS = 2
"""PostgreSQL's campaign_businesses is partitioned by a hash of the place id into this many tables (migration 12),
one for each connection a campaign's first search writes on (``postgres_store``). Migration 12's number: another
needs a migration of its own."""

MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (
        1,
        (
            # release is an Overture release name or 'requested': see placement.REQUESTED.
            """
            CREATE TABLE place_imports (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                release TEXT NOT NULL,
                rows INTEGER NOT NULL DEFAULT 0,
                imported_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (area, category)
            )
            """,
            """
            CREATE TABLE places (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                id TEXT NOT NULL,
                name TEXT,
                lat DOUBLE PRECISION NOT NULL,
                lng DOUBLE PRECISION NOT NULL,
                confidence DOUBLE PRECISION,
                address TEXT,
                country TEXT,
                websites TEXT,
                phones TEXT,
                release TEXT NOT NULL,
                PRIMARY KEY (area, category, id)
            )
            """,
            # A sequence rather than SERIAL: DuckDB has no SERIAL, and both accept this.
            "CREATE SEQUENCE campaigns_id_seq",
            """
            CREATE TABLE campaigns (
                id INTEGER PRIMARY KEY DEFAULT nextval('campaigns_id_seq'),
                name TEXT NOT NULL,
                targeting TEXT NOT NULL,
                status TEXT NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused')),
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            # A snapshot, not a view over places: a campaign's results survive the next import of its areas.
            """
            CREATE TABLE campaign_businesses (
                campaign_id INTEGER NOT NULL REFERENCES campaigns (id),
                place_id TEXT NOT NULL,
                name TEXT,
                category TEXT NOT NULL,
                lat DOUBLE PRECISION NOT NULL,
                lng DOUBLE PRECISION NOT NULL,
                distance_km DOUBLE PRECISION,
                address TEXT,
                websites TEXT,
                phones TEXT,
                country TEXT,
                added_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (campaign_id, place_id)
            )
            """,
        ),
    ),
    (
        2,
        (
            # Place names a user typed, as Nominatim resolved them: OpenStreetMap asks that a name be looked
            # up once, and a campaign added twice near "Leeds" must land on the same centre. query is the name
            # with its spaces collapsed and its case folded; only names that resolved to one place are kept.
            """
            CREATE TABLE place_names (
                query TEXT PRIMARY KEY,
                display_name TEXT NOT NULL,
                lat DOUBLE PRECISION NOT NULL,
                lng DOUBLE PRECISION NOT NULL,
                looked_up_at TIMESTAMPTZ NOT NULL
            )
            """,
        ),
    ),
    (
        3,
        (
            # What each campaign needs, worked out (placement.areas_for) when it is created or changed rather than
            # on every tick, so that the sensors find missing pairs, pending areas and new places with joins.
            # block is the import run that reads the area: its 4 x 4 block or its country (placement.block_key).
            """
            CREATE TABLE campaign_areas (
                campaign_id INTEGER NOT NULL REFERENCES campaigns (id),
                area TEXT NOT NULL,
                block TEXT NOT NULL,
                PRIMARY KEY (campaign_id, area)
            )
            """,
            "CREATE INDEX campaign_areas_by_area ON campaign_areas (area)",
            # rank is the category's place in the campaign's own order: a place of two categories is added once,
            # under the first.
            """
            CREATE TABLE campaign_categories (
                campaign_id INTEGER NOT NULL REFERENCES campaigns (id),
                category TEXT NOT NULL,
                rank INTEGER NOT NULL,
                PRIMARY KEY (campaign_id, category)
            )
            """,
            # When a campaign's search window began (the first search of the day), when the search sensor last
            # asked for it, and up to when the landed places have been searched: a search reads only the pairs
            # loaded after searched_through. searched_targeting is the targeting that search covered (a changed
            # one is searched in full again), businesses how many the campaign had then (so that a search with
            # nothing new need not count them). map_key, what the campaign's last map showed, went in version 11.
            """
            CREATE TABLE campaign_searches (
                campaign_id INTEGER PRIMARY KEY REFERENCES campaigns (id),
                window_start TIMESTAMPTZ,
                requested_at TIMESTAMPTZ,
                searched_at TIMESTAMPTZ,
                searched_through TIMESTAMPTZ,
                searched_targeting TEXT,
                businesses INTEGER,
                map_key TEXT
            )
            """,
            # The sensors look for what landed, aged or was asked for since a moment: a range on imported_at.
            "CREATE INDEX place_imports_by_time ON place_imports (imported_at)",
            # The last moment something changed what the campaigns need without showing in place_imports'
            # imported_at: a campaign added, changed, paused or resumed, a mark taken back, forgotten or dated back
            # as failed. The sensors look at everything again after one, and only at what changed otherwise.
            "CREATE TABLE needs_changes (id INTEGER PRIMARY KEY, changed_at TIMESTAMPTZ NOT NULL)",
            # Each active campaign's areas by import state and when real data last landed, as the search sensor
            # last counted them: a tick recounts only the campaigns whose pairs changed.
            """
            CREATE TABLE campaign_progress (
                campaign_id INTEGER PRIMARY KEY REFERENCES campaigns (id),
                areas INTEGER NOT NULL,
                coming INTEGER NOT NULL,
                missing INTEGER NOT NULL,
                not_loaded INTEGER NOT NULL,
                failed INTEGER NOT NULL,
                arrived_at TIMESTAMPTZ
            )
            """,
        ),
    ),
    (
        4,
        (
            # Who campaigns belong to. plan names one of the plans in force (plan_config), which bounds what the
            # account's active campaigns may ask for together; the store checks it whenever that would grow.
            # The default account (id 1, the sequence starts after it) holds every campaign that names none, on
            # the plan without limits, so that single-user use stays as it was.
            "CREATE SEQUENCE accounts_id_seq START 2",
            """
            CREATE TABLE accounts (
                id INTEGER PRIMARY KEY DEFAULT nextval('accounts_id_seq'),
                name TEXT NOT NULL UNIQUE,
                plan TEXT NOT NULL,
                created_at TIMESTAMPTZ NOT NULL
            )
            """,
            "INSERT INTO accounts (id, name, plan, created_at) VALUES (1, 'default', 'unlimited', current_timestamp)",
            # Existing campaigns belong to the default account. Neither NOT NULL nor REFERENCES: DuckDB adds no
            # column with a constraint, nor alters a table other tables refer to; the store writes only account
            # ids it has just read, and accounts are never deleted.
            "ALTER TABLE campaigns ADD COLUMN account_id INTEGER DEFAULT 1",
            # Why the store paused a campaign (its account moved to a plan it no longer fits), shown wherever the
            # campaign is; NULL for an active campaign or one paused by hand.
            "ALTER TABLE campaigns ADD COLUMN paused_reason TEXT",
        ),
    ),
    (
        5,
        (
            # The area holding the campaign's first location's centre (placement.first_area): its block, for the
            # campaign's first category, is the first block admission puts in line, so that every new campaign
            # shows businesses early whatever is queued. Filled for older campaigns by Store.migrate.
            "ALTER TABLE campaigns ADD COLUMN first_area TEXT",
            # The missing blocks in the order admission takes them (admission.line_up), as the import sensor last lined
            # them up: while nothing changes, a tick admits from its head instead of finding every missing pair.
            """
            CREATE TABLE import_line (
                block TEXT PRIMARY KEY,
                turn INTEGER NOT NULL,
                first_block BOOLEAN NOT NULL,
                account_id INTEGER,
                pairs INTEGER NOT NULL
            )
            """,
            "CREATE INDEX campaign_areas_by_block ON campaign_areas (block)",
        ),
    ),
    (
        6,
        (
            # How many active campaigns need each (area, category) pair, kept by the writes that change it (a
            # campaign added, paused, resumed or given a location), and when the pair last changed in a way
            # place_imports' imported_at does not show (those writes, and a mark taken back, forgotten or dated
            # back). A pair no campaign needs any more keeps its row, at 0, so that the coverage count sees it go.
            # block is the import run that reads it (placement.block_key), for the import line's pair counts.
            # Filled for older stores by Store.migrate, after the campaigns' own needs.
            """
            CREATE TABLE needed_pairs (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                block TEXT NOT NULL,
                campaigns INTEGER NOT NULL,
                changed_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (area, category)
            )
            """,
            "CREATE INDEX needed_pairs_by_change ON needed_pairs (changed_at)",
            # The state (shared.pair_state) of each needed pair that has a place_imports row, and that row, as the
            # coverage count last worked them out. A needed pair without a row is missing, never asked for: most
            # pairs of a big fleet are, and they cost no row here.
            """
            CREATE TABLE coverage_pairs (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                state TEXT NOT NULL,
                release TEXT NOT NULL,
                imported_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (area, category)
            )
            """,
            # Each state's oldest pairs, listed on the places page, through the index.
            "CREATE INDEX coverage_pairs_by_state ON coverage_pairs (state, imported_at, area, category)",
            # The counts the coverage check shows, kept as they change: 'needed' (pairs with campaigns > 0) by the
            # writers of needed_pairs, each state by the coverage count; missing is what the others leave.
            "CREATE TABLE coverage_counts (state TEXT PRIMARY KEY, pairs BIGINT NOT NULL)",
            # When the coverage count last ran (counted_at, on the callers' clock, as place_imports' times are;
            # 1970 for never) and up to when it saw needed_pairs' changes (needs_through, on the store's clock,
            # as changed_at is). Its row is locked for the count's transaction: counts run one at a time.
            """
            CREATE TABLE coverage_counted (
                id INTEGER PRIMARY KEY,
                counted_at TIMESTAMPTZ NOT NULL,
                needs_through TIMESTAMPTZ NOT NULL
            )
            """,
            """
            INSERT INTO coverage_counted (id, counted_at, needs_through)
            VALUES (1, TIMESTAMPTZ '1970-01-01 00:00:00+00', TIMESTAMPTZ '1970-01-01 00:00:00+00')
            """,
        ),
    ),
    (
        7,
        (
            # Why a mark's import failed, written when it fails (Store.mark_failed), which also sets the row's
            # imported_at to the failure's time: a failed mark reads as failed at once (placement.Cutoffs), every
            # time shown is true, and its block lasts RETRY_DAYS from the failure. NULL for a release, a mark on its
            # way, and a mark lost without a word (read as failed from IMPORT_HOURS after it was asked for). Marks
            # failed before this version were dated back 6 hours instead: they read as lost ones, as they did.
            "ALTER TABLE place_imports ADD COLUMN failure TEXT",
        ),
    ),
    (
        8,
        (
            # The newest imported_at among the landed pairs the campaign's last search read: a search need not run
            # again for places it has already seen (sensors.search_sensor.due_reason).
            "ALTER TABLE campaign_searches ADD COLUMN searched_landed TIMESTAMPTZ",
        ),
    ),
    (
        9,
        (
            # campaign_businesses again, without its foreign key, whose trigger checked the campaign once per row a
            # search added (2.4 s of a 7.0 s first search adding 644,095 businesses on PostgreSQL), and on DuckDB
            # without its primary key, whose index cost 0.6 to 1.2 s of that search's commit (0.01 s without).
            # Neither guarded anything a search relies on: campaigns are never deleted, a search reads its campaign
            # in the transaction that adds its businesses, and searches of one campaign take turns, each leaving
            # out what the campaign holds (search.add_found_businesses). PostgreSQL gets its primary key back
            # (POSTGRES_MIGRATIONS): its later searches look up each new place there. A table rebuilt, since DuckDB
            # drops no constraint; sorted by campaign, so that DuckDB's zone maps find each campaign's rows.
            """
            CREATE TABLE campaign_businesses_9 (
                campaign_id INTEGER NOT NULL,
                place_id TEXT NOT NULL,
                name TEXT,
                category TEXT NOT NULL,
                lat DOUBLE PRECISION NOT NULL,
                lng DOUBLE PRECISION NOT NULL,
                distance_km DOUBLE PRECISION,
                address TEXT,
                websites TEXT,
                phones TEXT,
                country TEXT,
                added_at TIMESTAMPTZ NOT NULL
            )
            """,
            f"""
            INSERT INTO campaign_businesses_9 ({_BUSINESS_COLUMNS})
            SELECT {_BUSINESS_COLUMNS} FROM campaign_businesses ORDER BY campaign_id, place_id
            """,
            "DROP TABLE campaign_businesses",
            "ALTER TABLE campaign_businesses_9 RENAME TO campaign_businesses",
        ),
    ),
    # PostgreSQL's alone (POSTGRES_MIGRATIONS).
    (10, ()),
    (
        11,
        (
            # Unwritten since a campaign's map is drawn again when its latest materialisation shows something else.
            "ALTER TABLE campaign_searches DROP COLUMN map_key",
        ),
    ),
    # PostgreSQL's alone (POSTGRES_MIGRATIONS).
    (12, ()),
    (
        13,
        (
            # Each active campaign's areas that have a pair in coverage_pairs, by the state the campaign sees them in
            # (progress.area_progress): every coverage count moves the rows of the areas whose pairs moved, and the
            # campaigns' progress by the difference, instead of counting again every campaign an area touched.
            """
            CREATE TABLE campaign_area_progress (
                campaign_id INTEGER NOT NULL,
                area TEXT NOT NULL,
                state TEXT NOT NULL,
                not_loaded BOOLEAN NOT NULL,
                landed_at TIMESTAMPTZ,
                PRIMARY KEY (campaign_id, area)
            )
            """,
            # The campaigns whose needs changed (added, resumed, given a location), to be counted whole by the next
            # count; due_at tells a note from a newer one for the same campaign.
            "CREATE TABLE progress_due (campaign_id INTEGER PRIMARY KEY, due_at TIMESTAMPTZ NOT NULL)",
            # The fleet's line of missing blocks before it is put in order (admission.line_up): each account's demand
            # for each block, and how many pairs the block misses. A coverage count notes the blocks of the pairs it
            # restated (line_due), and the reservation's next look works out only those again.
            """
            CREATE TABLE line_demand (
                block TEXT NOT NULL,
                account_id INTEGER NOT NULL,
                oldest_campaign INTEGER NOT NULL,
                first_of INTEGER,
                PRIMARY KEY (block, account_id)
            )
            """,
            "CREATE TABLE line_pairs (block TEXT PRIMARY KEY, pairs INTEGER NOT NULL)",
            "CREATE TABLE line_due (block TEXT PRIMARY KEY, noted_at TIMESTAMPTZ NOT NULL)",
            "CREATE INDEX line_due_by_time ON line_due (noted_at)",
            # The pairs whose coverage row moved and whose campaigns' areas are still to be moved by them: a count
            # takes the oldest few thousand, so that a count after a big change (a release gone stale at once, a
            # daemon back after a day) costs a bounded time, and the rest follows over the next counts.
            """
            CREATE TABLE progress_queue (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                noted_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (area, category)
            )
            """,
            "CREATE INDEX progress_queue_by_time ON progress_queue (noted_at)",
            "CREATE INDEX needed_pairs_by_block ON needed_pairs (block)",
            # The next count starts from scratch, and fills these tables.
            "UPDATE coverage_counted SET counted_at = TIMESTAMPTZ '1970-01-01 00:00:00+00'",
        ),
    ),
    (
        14,
        # Where the coverage count stopped in each range of place_imports it reads (needs_through is the range of
        # needed_pairs): a count reads a bounded share of a big change and the next goes on from there. Filled
        # by the migration from counted_at (Store.migrate).
        tuple(
            f"ALTER TABLE coverage_counted ADD COLUMN {name}_through TIMESTAMPTZ"
            for name in ("imports", "fresh", "coming", "retry")
        ),
    ),
    (
        15,
        (
            # The drift gate (nakodo_dagster.drift): a pair whose newer release moved too far from the places it
            # holds keeps those places, and the new release's rows wait here with the numbers that held them, until
            # an analyst accepts them (Store.accept_held) or a later read of the pair passes or is held in their
            # stead. kept_release is the release whose places campaigns keep meanwhile.
            """
            CREATE TABLE held_imports (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                release TEXT NOT NULL,
                kept_release TEXT NOT NULL,
                places_before INTEGER NOT NULL,
                places_after INTEGER NOT NULL,
                places_kept INTEGER NOT NULL,
                confidence_before DOUBLE PRECISION,
                confidence_after DOUBLE PRECISION,
                reasons TEXT NOT NULL,
                held_at TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (area, category)
            )
            """,
            # The held rows themselves, as places would hold them: accepting needs no read of a release that may
            # be offline by then (Overture keeps two).
            """
            CREATE TABLE held_places (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                id TEXT NOT NULL,
                name TEXT,
                lat DOUBLE PRECISION NOT NULL,
                lng DOUBLE PRECISION NOT NULL,
                confidence DOUBLE PRECISION,
                address TEXT,
                country TEXT,
                websites TEXT,
                phones TEXT,
                release TEXT NOT NULL,
                PRIMARY KEY (area, category, id)
            )
            """,
        ),
    ),
    (
        16,
        (
            # Whether a noted block holds an active campaign's first pair, worked out when the count notes it (for
            # the pairs it restated, through POSTGRES_MIGRATIONS' index on campaigns' first areas) rather than by
            # every look for every noted block: at 10,000 campaigns the look's ordering probed every campaign area
            # of some 10,000 noted blocks. Filled by the next count, which starts from scratch.
            "DROP TABLE line_due",
            """
            CREATE TABLE line_due (block TEXT PRIMARY KEY, noted_at TIMESTAMPTZ NOT NULL, first_block BOOLEAN NOT NULL)
            """,
            "CREATE INDEX line_due_by_time ON line_due (noted_at)",
            "UPDATE coverage_counted SET counted_at = TIMESTAMPTZ '1970-01-01 00:00:00+00'",
        ),
    ),
    (
        17,
        (
            # The release a pair's places came from (or its having none), which a mark on its way or a failed mark
            # overwrites in `release`: a changelog carries over only pairs read from the release just before its
            # own (store/carry.py). Marks of pairs that hold places get their places' release; a mark of a pair
            # without places stays unknown, and is read. places_carried says the pair's places were carried over
            # to that release unread, so that a release's roll-out counts what was read and what was carried.
            "ALTER TABLE place_imports ADD COLUMN places_release TEXT",
            "ALTER TABLE place_imports ADD COLUMN places_carried BOOLEAN DEFAULT FALSE",
            "UPDATE place_imports SET places_release = release WHERE release <> 'requested'",
            """
            UPDATE place_imports SET places_release = (
                SELECT max(places.release) FROM places
                WHERE places.area = place_imports.area AND places.category = place_imports.category
            )
            WHERE release = 'requested'
            """,
        ),
    ),
    (
        18,
        (
            # What each import changed about its pairs' place ids, for the campaigns' next searches (store/changes.py):
            # a place kept under a new id (old_id and new_id), removed (old_id alone) or back (new_id alone).
            """
            CREATE TABLE place_changes (
                area TEXT NOT NULL,
                category TEXT NOT NULL,
                release TEXT NOT NULL,
                changed_at TIMESTAMPTZ NOT NULL,
                old_id TEXT,
                new_id TEXT
            )
            """,
            "CREATE INDEX place_changes_by_pair ON place_changes (area, category, changed_at)",
            # The release a business was removed from Overture in; NULL while it is in the newest release its pairs
            # were read from.
            "ALTER TABLE campaign_businesses ADD COLUMN removed_in TEXT",
        ),
    ),
    (
        19,
        (
            # A place's source records, Overture's sources[] as 'dataset:record_id' joined by '|' in sorted order:
            # the first evidence that a reissued id is the same business (store/changes.py). NULL for rows written
            # before, or by a reader that had none.
            "ALTER TABLE places ADD COLUMN sources TEXT",
            "ALTER TABLE held_places ADD COLUMN sources TEXT",
            # Held rows keep the places Overture marks permanently_closed, which never list as businesses: an
            # acceptance records the closures as an import does.
            "ALTER TABLE held_places ADD COLUMN closed BOOLEAN DEFAULT FALSE",
            # A change that closed a place: old_id alone, with closed (a removal has it false).
            "ALTER TABLE place_changes ADD COLUMN closed BOOLEAN DEFAULT FALSE",
            # The release a business was marked permanently closed in; NULL while it operates.
            "ALTER TABLE campaign_businesses ADD COLUMN closed_in TEXT",
        ),
    ),
    (
        20,
        (
            # The release an analyst asked a loaded pair to move to now (`imports roll-out`): the pair reads as
            # missing (placement.rolled_out) until the import sensor's mark ends the request.
            "ALTER TABLE place_imports ADD COLUMN roll_out TEXT",
        ),
    ),
)

# Statements PostgreSQL alone runs after a version's own.
POSTGRES_MIGRATIONS: dict[int, tuple[str, ...]] = {
    # A campaign's later searches leave out what it holds by looking up each new place here; without it PostgreSQL
    # read every business of the campaign per place. DuckDB joins by hash instead and reads a campaign's rows
    # through its zone maps.
    9: ("ALTER TABLE campaign_businesses ADD PRIMARY KEY (campaign_id, place_id)",),
    # Place ids under "C": the key compares bytes instead of calling strcoll, and a search, which adds in the order
    # of its sort by id in bytes (search.FIRST_BY_DISTINCT_ON), appends to it rather than inserting all over it under
    # a language's collation. A first search of 644,095 businesses: the key cost 0.3 s instead of 0.6 to 0.9 s.
    10: ('ALTER TABLE campaign_businesses ALTER COLUMN place_id TYPE TEXT COLLATE "C"',),
    # campaign_businesses partitioned by a hash of the place id, so that each connection of a first search writes
    # a table and a key of its own (search.POSTGRES_SHARE_OF_PLACES picks each connection's places by the same hash).
    # Two connections writing one table waited on each other's pages of it, its key's last ones above all: a first
    # search of 644,095 businesses took 1.90 s, 1.66 s into the partitions. The key is built after the copy, in one
    # pass; LIKE keeps place_id's "C" collation.
    12: (
        "CREATE TABLE campaign_businesses_12 (LIKE campaign_businesses) PARTITION BY HASH (place_id)",
        *(
            f"CREATE TABLE campaign_businesses_part_{remainder} PARTITION OF campaign_businesses_12 "
            f"FOR VALUES WITH (MODULUS {BUSINESS_PARTITIONS}, REMAINDER {remainder})"
            for remainder in range(BUSINESS_PARTITIONS)
        ),
        f"INSERT INTO campaign_businesses_12 ({_BUSINESS_COLUMNS}) SELECT {_BUSINESS_COLUMNS} FROM campaign_businesses",
        "DROP TABLE campaign_businesses",
        "ALTER TABLE campaign_businesses_12 RENAME TO campaign_businesses",
        "ALTER TABLE campaign_businesses ADD PRIMARY KEY (campaign_id, place_id)",
    ),
    # DuckDB keeps no such index: it updates an indexed column as a delete and an insert, which a foreign key to
    # campaigns refuses, and it joins the restated pairs with campaigns by hash.
    16: ("CREATE INDEX campaigns_by_first_area ON campaigns (first_area)",),
    # An import's changes look places and earlier changes up by id: a gone place still in another pair is not
    # removed, an arrival once removed is back, a chain of reissues leads on. DuckDB joins by hash.
    18: (
        "CREATE INDEX places_by_id ON places (id)",
        "CREATE INDEX place_changes_by_old_id ON place_changes (old_id)",
        "CREATE INDEX place_changes_by_new_id ON place_changes (new_id)",
    ),
}
