"""The changelog part: one release change read with the release's changelog and without it, side by side."""

from __future__ import annotations

from bench.report.common import measured_when, megabytes

CASES = {"without_changelog": "every block read", "with_changelog": "with the changelog"}


def sections(results: dict, summary: dict) -> list[str]:
    """The changelog's section of results.md: block runs that read, pairs carried over, bytes and seconds."""
    if "changelog" not in results:
        return []
    figures = results["changelog"]
    without, with_ = figures["without_changelog"], figures["with_changelog"]
    drift = figures["drift"]

    def row(label: str, value) -> str:
        return f"| {label} | " + " | ".join(value(figures[case]) for case in CASES) + " |"

    saved_runs = without["runs_reading"] - with_["runs_reading"]
    return [
        f"## A new release with its changelog (measured {measured_when(results, 'changelog')})",
        "",
        f"A sample of {figures['rows']:,} places, release {figures['release_before']} then {figures['release']} (a "
        f"month: {drift['churn']:.0%} of the places gone and as many new, {drift['edited']:.0%} of those kept edited, "
        f"{drift['reissued']:.0%} under new ids), and its GERS changelog beside the releases. Each sample city's "
        "50 km campaign (bakery, cafe, pub) imported from the first release, then the same block runs through the "
        "import's own code path from the second, once on a copy of the store with the changelog and once without. "
        f"**{saved_runs} of {without['block_runs']} block runs read nothing** and "
        f"{with_['pairs_carried']:,} of {with_['pairs']:,} pairs moved to the new release unread; both stores end "
        f"with {'the same' if figures['same_places'] else 'DIFFERENT'} places. The runs the changelog spares are the "
        "quiet ones, whose reads cost little: the busy cells, where the month changed something, are read either "
        "way, and each run that consults the changelog reads its footers and its box's groups again.",
        "",
        "| | " + " | ".join(CASES.values()) + " |",
        "|---|---:|---:|",
        row("block runs that read the release", lambda f: f"{f['runs_reading']} of {f['block_runs']}"),
        row("pairs carried over unread", lambda f: f"{f['pairs_carried']:,} of {f['pairs']:,}"),
        row("release bytes read", lambda f: megabytes(f["bytes_read"])),
        row("changelog bytes read", lambda f: megabytes(f["changelog_bytes_read"])),
        row("all bytes read", lambda f: megabytes(f["total_bytes"])),
        row("seconds, every run one after the other", lambda f: f"{f['seconds']:.1f} s"),
        "",
    ]
