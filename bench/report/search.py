"""The search part: case (d), a campaign's search over a million loaded places on each backend, first with
everything new and then with nothing new."""

from __future__ import annotations

from bench.report.common import BACKEND_NAMES, GlanceRow, duration, measured_when, verdict

# Case (d): a first search adding 644 k businesses, and a search with nothing new, at 1 M loaded places.
FIRST_SEARCH_TARGET_S = 2.0
NEXT_SEARCH_TARGET_S = 0.05


def searches(results: dict) -> dict[str, dict]:
    """Each backend's search figures; a results.json written before both backends were measured had DuckDB's only."""
    search = results.get("search", {})
    return {"duckdb": search} if "first_search_s" in search else search


def summarise(results: dict) -> dict:
    """Each backend's searches against their targets."""
    if "search" not in results:
        return {}
    return {
        "search_targets": {
            backend: {
                "first_under_2_s": search["first_search_s"] < FIRST_SEARCH_TARGET_S,
                "nothing_new_under_50_ms": search["next_search_s"] < NEXT_SEARCH_TARGET_S,
            }
            for backend, search in searches(results).items()
        }
    }


def glance_rows(results: dict, summary: dict) -> list[GlanceRow]:
    """Each backend's two searches against their targets, for the glance."""
    rows = []
    for backend, search in searches(results).items():
        targets = summary["search_targets"][backend]
        name = BACKEND_NAMES.get(backend, backend)
        rows += [
            GlanceRow(
                f"first search adding {search['first_search_added']:,} businesses ({name})",
                duration(search["first_search_s"]),
                f"under {FIRST_SEARCH_TARGET_S:g} s",
                targets["first_under_2_s"],
            ),
            GlanceRow(
                f"search with nothing new, {search['places_loaded']:,} places loaded ({name})",
                duration(search["next_search_s"]),
                f"under {NEXT_SEARCH_TARGET_S * 1000:g} ms",
                targets["nothing_new_under_50_ms"],
            ),
        ]
    return rows


def sections(results: dict, summary: dict) -> list[str]:
    """Case (d)'s section of results.md: each backend's searches, and why a missed one took its time."""
    if "search" not in results:
        return []
    measured = searches(results)
    some = next(iter(measured.values()))
    lines = [
        f"## (d) A campaign's search over loaded places, both backends (measured {measured_when(results, 'search')})",
        "",
        f"{some['places_loaded']:,} places with Overture's random UUID ids loaded in {some['areas']} cells through "
        "`Store.write_import` (on "
        "PostgreSQL then analysed, as autovacuum does within a minute of such a load); "
        f"{len(some['first_search_samples_s'])} campaigns of 200 km with 5 categories, each searched through the "
        "store's incremental search (`Store.add_campaign_businesses`) twice: first, when all of it is new, then with "
        "nothing new; then once more after its targeting changed (everything read again, nothing new). On "
        "PostgreSQL a first search spreads its insert over two connections, half the places each (PostgreSQL runs "
        "no INSERT ... SELECT in parallel). Medians; every sample in the last column; the load average when each "
        "backend's part began beside it.",
        "",
        "| backend | search | wall time | target | businesses added | samples |",
        "|---|---|---:|---|---:|---|",
    ]
    notes = []
    for backend, search in measured.items():
        targets = summary["search_targets"][backend]
        name = BACKEND_NAMES.get(backend, backend)
        load = search.get("load_before")
        first_samples = ", ".join(duration(x) for x in search["first_search_samples_s"])
        next_samples = ", ".join(duration(x) for x in search["next_search_samples_s"])
        label = f"{name} (load {load[0]:.1f})" if load else name
        lines += [
            f"| {label} | first (everything new) | {duration(search['first_search_s'])} | "
            f"under {FIRST_SEARCH_TARGET_S:g} s: {verdict(targets['first_under_2_s'])} | "
            f"{search['first_search_added']:,} | {first_samples} |",
            f"| {name} | next (nothing new) | {duration(search['next_search_s'])} | "
            f"under {NEXT_SEARCH_TARGET_S * 1000:g} ms: {verdict(targets['nothing_new_under_50_ms'])} | "
            f"{search['next_search_added']:,} | {next_samples} |",
            f"| {name} | again after its targeting changed | {duration(search['rescan_s'])} | | "
            f"{search['rescan_added']:,} | |",
        ]
        if not targets["first_under_2_s"]:
            notes += [
                f"{name}: the first search missed by {search['first_search_s'] / FIRST_SEARCH_TARGET_S:.2f}x. The "
                f"search after a change of targeting reads and measures everything and inserts nothing, in "
                f"{duration(search['rescan_s'])}: every loaded place of the campaign's pairs and its haversine "
                f"distance, then a look-up among the {search['first_search_added']:,} businesses the campaign holds "
                "(the anti-join a first search leaves out), which finds them all, so nothing is kept once or "
                "inserted (on one connection: it holds businesses already). It does not split the first search "
                "into reading and writing.",
                "",
            ]
        if not targets["nothing_new_under_50_ms"]:
            notes += [
                f"{name}: the search with nothing new missed by "
                f"{search['next_search_s'] / NEXT_SEARCH_TARGET_S:.2f}x. It is three short statements in one "
                "transaction (the campaign's search state, the range of place_imports landed since its last search, "
                "the search recorded); on DuckDB each transaction also opens the store file under its lock.",
                "",
            ]
    return [*lines, "", *notes]
