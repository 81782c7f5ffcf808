"""The run queue of both instances (the embedded default's and production's): Dagster's own, which also tags a run
of the places asset as an import.

The import sensor's runs carry `nakodo/kind=import` from their job, and the queue lets two of them run at once
(dagster.yaml's tag limit). A run of places launched by hand from the UI, or by a backfill, is a run of Dagster's
asset job, which carries no tag of ours: without one, every such run started at once and waited inside for a slot
of the import pool, holding a process. Tagged as it is queued, it waits in the queue like the sensor's.

It runs in the process that submits a run: the webserver for a launch from the UI, the daemon for the sensors'.
In production both therefore run the code server's image (deploy/production/values.yaml).
"""

from __future__ import annotations

import dagster as dg

from nakodo_dagster import tags
from nakodo_dagster.imports.events import PLACES


class ImportTaggingRunCoordinator(dg.QueuedRunCoordinator):
    """Dagster's queued run coordinator; a run that materialises places is tagged `nakodo/kind=import` first."""

    def submit_run(self, context: dg.SubmitRunContext) -> dg.DagsterRun:
        run = context.dagster_run
        if run.asset_selection and PLACES in run.asset_selection and run.tags.get(tags.KIND) != tags.IMPORT_KIND:
            self._instance.add_run_tags(run.run_id, {tags.KIND: tags.IMPORT_KIND})
            tagged = self._instance.get_run_by_id(run.run_id)
            if tagged is not None:
                context = dg.SubmitRunContext(tagged, context.workspace)
        return super().submit_run(context)
