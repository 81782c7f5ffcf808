"""A release rolled out on demand: chosen loaded pairs asked to move now to the release the import sensor reads, which
then asks for them through its queue (fair across accounts, under the admission cap, each run past the drift gate).
What ``nakodo imports roll-out`` and the Dagster UI's roll_out_release job share; no Dagster here."""

from __future__ import annotations

from nakodo_dagster.errors import InvalidInput
from nakodo_dagster.overture.releases import check_release_name, resolve_release
from nakodo_dagster.resources.overture import OFF_REASON
from nakodo_dagster.store import Store

# What names the release the import sensor reads, whichever it is.
NEWEST = "newest"


def roll_out(
    store: Store,
    root: str,
    configured: str,
    release: str,
    *,
    campaign_id: int | None = None,
    category: str | None = None,
    everything: bool = False,
) -> tuple[str, int]:
    """Ask the pairs chosen (a campaign's, a category's, or ``everything`` active campaigns need) to move to
    ``release`` (a name, or ``newest``) now; returns the release and how many pairs were asked.

    ``root`` and ``configured`` are NAKODO_OVERTURE_ROOT and NAKODO_OVERTURE_RELEASE: the import sensor reads the
    configured release, else the newest under the root, and pairs move only to the release it reads. InvalidInput,
    with nothing written, for anything else."""
    if sum((campaign_id is not None, category is not None, everything)) != 1:
        raise InvalidInput("choose which pairs move: exactly one of a campaign, a category or all of them")
    if release != NEWEST:
        check_release_name(release)
    if not root.strip():
        raise InvalidInput(f"imports are off ({OFF_REASON}): no pair can move to a release until it is set")
    reading = resolve_release(root.strip(), configured.strip() or None)
    wanted = resolve_release(root.strip(), None if release == NEWEST else release)
    if wanted != reading:
        raise InvalidInput(
            f"the import sensor reads release {reading} (NAKODO_OVERTURE_RELEASE if set, else the newest under the "
            f"root), so pairs can move only to it: roll out {reading}, or set NAKODO_OVERTURE_RELEASE to {wanted} "
            "first"
        )
    return reading, store.roll_out(reading, campaign_id=campaign_id, category=category)
