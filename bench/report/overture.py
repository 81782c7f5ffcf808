"""The overture part: reads at Overture's scale, this project beside a pyarrow dataset, and a new release's index
build, against issue 22's targets."""

from __future__ import annotations

from bench.report.common import (
    GlanceRow,
    duration,
    measured_when,
    median_of,
    megabytes,
    reader_medians,
    verdict,
)

# Issue 22's targets: both reads 3x a pyarrow dataset, a block under 0.2 s, bytes within 1.1x of the needed row
# groups' columns, a new release's index under 1 s.
TARGET_VS_PYARROW = 3.0
TARGET_BLOCK_S = 0.2
TARGET_FLOOR = 1.1
TARGET_INDEX_BUILD_S = 1.0
READERS = {"index": "this project", "pyarrow": "pyarrow dataset + bbox"}


def summarise(results: dict) -> dict:
    """Medians of each read, the ratios to pyarrow and the floor, and issue 22's targets."""
    if "overture" not in results:
        return {}
    overture = results["overture"]
    reads = {}
    for name, case in overture["cases"].items():
        readers = reader_medians(case, READERS)
        index = readers["index"]
        ratios = {
            "pyarrow_over_index_time": readers["pyarrow"]["seconds"] / index["seconds"],
            "index_bytes_over_floor": index["bytes"] / case["floor_bytes"],
            "pyarrow_bytes_over_floor": readers["pyarrow"]["bytes"] / case["floor_bytes"],
        }
        targets = {
            "3x_faster_than_pyarrow": ratios["pyarrow_over_index_time"] >= TARGET_VS_PYARROW,
            "bytes_within_1.1x_floor": ratios["index_bytes_over_floor"] <= TARGET_FLOOR,
        }
        if name.endswith("block"):
            targets["under_0.2_s"] = index["seconds"] < TARGET_BLOCK_S
        reads[name] = {"readers": readers, "ratios": ratios, "targets": targets}
    build = {key: median_of(overture["index_build"], key) for key in ("seconds", "requests", "bytes")}
    return {
        "overture": {
            "reads": reads,
            "index_build": build | {"under_1_s": build["seconds"] < TARGET_INDEX_BUILD_S},
        }
    }


def glance_rows(results: dict, summary: dict) -> list[GlanceRow]:
    """Each read at Overture's scale and the index build against their targets, for the glance."""
    if "overture" not in results:
        return []
    numbers = summary["overture"]
    rows = []
    for name, read in numbers["reads"].items():
        rows += [
            GlanceRow(
                f"{name} at Overture's scale vs a pyarrow dataset",
                f"{read['ratios']['pyarrow_over_index_time']:.1f}x ({read['readers']['index']['seconds']:.2f} s)",
                f"at least {TARGET_VS_PYARROW:g}x",
                read["targets"]["3x_faster_than_pyarrow"],
            ),
            GlanceRow(
                f"{name} at Overture's scale, bytes over the floor",
                f"{read['ratios']['index_bytes_over_floor']:.2f}x",
                f"at most {TARGET_FLOOR:g}x",
                read["targets"]["bytes_within_1.1x_floor"],
            ),
        ]
        if "under_0.2_s" in read["targets"]:
            rows.append(
                GlanceRow(
                    f"{name} at Overture's scale",
                    duration(read["readers"]["index"]["seconds"]),
                    f"under {TARGET_BLOCK_S:g} s",
                    read["targets"]["under_0.2_s"],
                )
            )
    rows.append(
        GlanceRow(
            "a new release's index build at Overture's scale",
            duration(numbers["index_build"]["seconds"]),
            f"under {TARGET_INDEX_BUILD_S:g} s",
            numbers["index_build"]["under_1_s"],
        )
    )
    return rows


def sections(results: dict, summary: dict) -> list[str]:
    """The section of results.md on Overture's scale: the release, the index build, a table of the reads and each
    read's verdicts."""
    if "overture" not in results:
        return []
    overture, numbers = results["overture"], summary["overture"]
    build = numbers["index_build"]
    build_samples = ", ".join(f"{sample['seconds']:.2f}" for sample in overture["index_build"])
    lines = [
        f"## Reading at Overture's scale (measured {measured_when(results, 'overture')})",
        "",
        f"Overture's scale, beside the one above: {overture['rows']:,} places in {overture['files']} files of "
        f"{overture['row_groups_per_file']} row groups ({megabytes(overture['release_bytes'])}), served by moto on "
        f"loopback behind the proxy adding {overture['latency_ms']:g} ms to every request. Each read runs in a fresh "
        f"process, {overture['repeat']} times, this project and the pyarrow dataset in turn (so that the machine's "
        "other work weighs on both alike); medians, and the ratios of the medians. Requests and bytes are counted at "
        f"the proxy. The load average when the part began: {' / '.join(f'{x:.1f}' for x in overture['load_before'])} "
        "(1, 5, 15 minutes) on 2 CPUs shared with other work, the S3 server and the proxy.",
        "",
        f"First read of a new release, the index built in a fresh process: **{build['seconds']:.2f} s** (target under "
        f"{TARGET_INDEX_BUILD_S:g} s: {verdict(build['under_1_s'])}), {build['requests']:,.0f} requests, "
        f"{megabytes(build['bytes'])}; samples {build_samples} s.",
        "",
        "| read | this project | pyarrow dataset | ratio | CPU seconds | requests | bytes | floor (row groups, bytes) "
        "| bytes / floor | rows |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    notes = []
    for name, case in overture["cases"].items():
        read = numbers["reads"][name]
        index, pyarrow = read["readers"]["index"], read["readers"]["pyarrow"]
        samples = {reader: ", ".join(f"{sample['seconds']:.2f}" for sample in case[reader]) for reader in READERS}
        lines.append(
            f"| {case['title']} | {index['seconds']:.2f} s | {pyarrow['seconds']:.2f} s | "
            f"{read['ratios']['pyarrow_over_index_time']:.1f}x | {_cpu(index)} (pyarrow {_cpu(pyarrow)}) | "
            f"{index['requests']:,.0f} (pyarrow "
            f"{pyarrow['requests']:,.0f}) | {megabytes(index['bytes'])} (pyarrow {megabytes(pyarrow['bytes'])}) | "
            f"{case['floor_row_groups']:,}, {megabytes(case['floor_bytes'])} | "
            f"{read['ratios']['index_bytes_over_floor']:.2f}x | {index['rows']:,.0f} |"
        )
        verdicts = [
            f"{read['ratios']['pyarrow_over_index_time']:.1f}x pyarrow (target ≥{TARGET_VS_PYARROW:g}x: "
            f"{verdict(read['targets']['3x_faster_than_pyarrow'])})",
            f"{read['ratios']['index_bytes_over_floor']:.2f}x the floor's bytes (target ≤{TARGET_FLOOR:g}x: "
            f"{verdict(read['targets']['bytes_within_1.1x_floor'])})",
        ]
        if "under_0.2_s" in read["targets"]:
            verdicts.append(
                f"{index['seconds']:.2f} s (target under {TARGET_BLOCK_S:g} s: "
                f"{verdict(read['targets']['under_0.2_s'])})"
            )
        notes += [
            f"{case['title']}: {'; '.join(verdicts)}. Samples: this project {samples['index']} s; "
            f"pyarrow {samples['pyarrow']} s.",
            "",
        ]
    return [*lines, "", *notes]


def _cpu(reader: dict) -> str:
    """A reader's CPU seconds; samples from before CPU time was measured have none."""
    return f"{reader['cpu_seconds']:.2f}" if "cpu_seconds" in reader else "-"
