"""Overture Maps' places releases: a local folder (offline default) or an s3:// prefix (production)."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

import dagster as dg
from pydantic import Field

from nakodo_dagster.overture.changelog import RunChanges, changelog_beside, read_run_changes
from nakodo_dagster.overture.index import index_folder
from nakodo_dagster.overture.reader import ReadResult, read_places_retried
from nakodo_dagster.overture.releases import check_release_name, check_root, release_before, resolve_release
from nakodo_dagster.pacing import DEFAULT_IMPORT_RUNS_PER_HOUR, IMPORT_QUEUE_MINUTES, queue_cap
from nakodo_dagster.placement import ImportRun

OFF_REASON = "NAKODO_OVERTURE_ROOT isn't set"


class OvertureResource(dg.ConfigurableResource):
    """Where Overture's places releases are read from, and which release.

    ``root`` is a folder holding ``<release>/theme=places/type=place/*.parquet`` (the project's sample
    releases) or an ``s3://`` prefix (``s3://overturemaps-us-west-2/release`` in production; another
    S3-compatible endpoint is named by ``AWS_ENDPOINT_URL``). An empty root switches imports off: the
    search works on what is already loaded and no import is asked for.

    ``index`` is the folder of release indexes, which every run and process of a deployment shares (a volume
    every pod mounts). Empty: beside the store when ``NAKODO_DATABASE`` is a DuckDB file, else the user's
    cache folder; never the working folder.

    ``changelog`` is where the releases' GERS changelogs are (``<changelog>/<release>/theme=places/type=place/
    change_type=*/*.parquet``); empty: beside the root, as Overture keeps them (``s3://overturemaps-us-west-2/
    changelog``). Where the release read has one, a block's pairs that it lists no change for move to the release
    without reading it; without one, every block is read.

    ``queue_minutes`` is how much import work Dagster's run queue holds, at the pace it is observed to keep: the
    import sensor reserves pairs only for runs the queue starts within it (never fewer than twice the two
    slots), so a new campaign's first block never waits behind hours of another account's backlog.
    """

    root: str = Field(default="", description="Folder or s3:// prefix of releases (NAKODO_OVERTURE_ROOT).")
    release: str = Field(default="", description="Release; empty: the newest (NAKODO_OVERTURE_RELEASE).")
    index: str = Field(
        default="",
        description="Folder of release indexes; empty: beside a DuckDB store, else the user's cache "
        "(NAKODO_OVERTURE_INDEX).",
    )

    changelog: str = Field(
        default="",
        description="Folder or s3:// prefix of the releases' changelogs; empty: beside the root "
        "(NAKODO_OVERTURE_CHANGELOG).",
    )

    queue_minutes: int = Field(
        default=IMPORT_QUEUE_MINUTES,
        description="Minutes of import work the queue holds (NAKODO_IMPORT_QUEUE_MINUTES).",
    )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Refuse a root, a release name or a queue length that cannot be right, before a tick reserves anything
        or a run reads."""
        if self.root.strip():
            check_root(self.root)
        if self.release.strip():
            check_release_name(self.release.strip())
        if self.changelog.strip():
            check_root(self.changelog.strip())
        queue_cap(DEFAULT_IMPORT_RUNS_PER_HOUR, self.queue_minutes)

    @property
    def index_dir(self) -> Path:
        """The folder of release indexes: ``index``, or its default worked out now (never at import)."""
        return index_folder(self.index, os.environ)

    @property
    def off_reason(self) -> str | None:
        """Why imports are off, or None when they are on."""
        return None if self.root.strip() else OFF_REASON

    def current_release(self) -> str:
        """The release to import: the configured one, or the newest under the root."""
        return resolve_release(self.root, self.release.strip() or None)

    def read(self, run: ImportRun, release: str, began: datetime | None = None) -> ReadResult:
        """The places one import run reads from the release, a transient fault tried again within the read
        (``reader.read_places_retried``: ReadFailed says what failed for good); ``began`` is when the import began
        reading (None: now), before which a file found unreadable was unreadable from the first read."""
        return read_places_retried(run, self.root, release, index_dir=self.index_dir, began=began)

    def release_before(self, release: str) -> str | None:
        """The release listed just before ``release`` under the root: the one its changelog compares with."""
        return release_before(self.root, release)

    def changes(self, run: ImportRun, release: str, base: str) -> RunChanges | None:
        """What the release's changelog lists in the run's cells since ``base``, or None with nothing to go by (no
        changelog for the release, or a country's run)."""
        changelog = self.changelog.strip() or changelog_beside(check_root(self.root))
        return read_run_changes(run, changelog, release, base)
