"""The set-based needs the store computes equal placement's reference, on any campaigns and freshness rows."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_helpers import NOW, RELEASE, needs_of

from nakodo_dagster.placement import (
    FRESH_DAYS,
    IMPORT_HOURS,
    REQUESTED,
    RETRY_DAYS,
    Cutoffs,
    PlaceImport,
    PointLocation,
    Targeting,
    areas_for,
    campaigns_needs,
)
from nakodo_dagster.store import Store

SECOND = timedelta(seconds=1)
# Every boundary of the rules, a second either side of it and on it.
BOUNDARY_AGES = [
    edge + offset
    for edge in (timedelta(0), timedelta(hours=IMPORT_HOURS), timedelta(days=RETRY_DAYS), timedelta(days=FRESH_DAYS))
    for offset in (-SECOND, timedelta(0), SECOND)
    if edge + offset >= timedelta(0)
]
CATEGORIES = ("cafe", "pub", "bakery")
NEWER = "2099-01-01.0"

# Circles around the Pennines, close enough that campaigns share cells and blocks.
targetings = st.builds(
    Targeting,
    st.lists(
        st.builds(
            PointLocation,
            st.floats(53.0, 54.5),
            st.floats(-3.0, -0.5),
            st.sampled_from([2, 5, 10, 25]),
        ),
        min_size=1,
        max_size=2,
    ).map(tuple),
    st.lists(st.sampled_from(CATEGORIES), min_size=1, max_size=3, unique=True).map(tuple),
)


def _replace_everything(store: Store, campaigns: list[Targeting], rows: list[PlaceImport]) -> None:
    def work(tx) -> None:
        # The earlier examples' campaigns are paused rather than deleted: DuckDB refuses to delete a row that
        # rows deleted in the same transaction referred to. Paused campaigns need nothing.
        tx.run("UPDATE campaigns SET status = 'paused'")
        # What pausing them through the store also does: no pair is needed by them any more.
        tx.run("UPDATE needed_pairs SET campaigns = 0")
        tx.run("DELETE FROM place_imports")
        if rows:
            tx.run(
                "INSERT INTO place_imports (area, category, release, rows, imported_at) "
                "SELECT unnest($areas::TEXT[]), unnest($categories::TEXT[]), unnest($releases::TEXT[]), 0, "
                "unnest($stamps::TIMESTAMPTZ[])",
                areas=[r.area for r in rows],
                categories=[r.category for r in rows],
                releases=[r.release for r in rows],
                stamps=[r.imported_at for r in rows],
            )
        for row in rows:
            if row.roll_out is not None:
                tx.run(
                    "UPDATE place_imports SET roll_out = $roll_out WHERE area = $area AND category = $category",
                    roll_out=row.roll_out,
                    area=row.area,
                    category=row.category,
                )

    store._transact(work)
    for number, targeting in enumerate(campaigns):
        store.add_campaign(f"campaign {number}", targeting)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(campaigns=st.lists(targetings, min_size=1, max_size=3), data=st.data())
def test_the_database_needs_equal_import_needs(store, campaigns, data):
    pairs = sorted({(area, c) for t in campaigns for area in areas_for(t) for c in t.categories})
    chosen = data.draw(st.lists(st.sampled_from(pairs), unique=True, max_size=len(pairs)))
    rows = [
        PlaceImport(
            area,
            category,
            data.draw(st.sampled_from([REQUESTED, RELEASE])),
            0,
            NOW - data.draw(st.sampled_from(BOUNDARY_AGES)),
            # An analyst's roll-out to a newer release, to the one the pair holds, or none.
            roll_out=data.draw(st.sampled_from([None, RELEASE, NEWER])),
        )
        for area, category in chosen
    ]
    _replace_everything(store, campaigns, rows)

    _, expected = campaigns_needs(campaigns, rows, NOW)
    needs = needs_of(store, NOW)

    assert needs.missing == expected.missing
    assert needs.coming == expected.coming
    assert needs.arrived_at == expected.arrived_at
    reservation = store.reserve_missing(NOW, max_runs=0)
    assert reservation.missing_pairs == sum(len(categories) for categories in expected.missing.values())
    cutoffs = Cutoffs.at(NOW)
    assert reservation.coming_pairs == sum(cutoffs.row_state(r) == "coming" for r in rows)
