"""An import run in one place, one way down and one way back up.

The import_places op (``jobs.import_places``) and the places asset's re-import by hand (``assets.places``) call
``run.import_or_release_marks``: it moves to the release, unread, the pairs its changelog vouches for
(``overture.changelog``, ``Store.carry_over``), reads the rest of the run's box through ``OvertureResource.read``
(``overture.reader`` plans the read over the release's index, ``overture.fetch`` fetches, and a transient fault is
tried again within the read), writes those pairs with ``Store.write_import`` and returns an
``outcome.ImportOutcome``; if the import
fails, ``failure`` marks its pairs failed or takes them back and builds the step's ``dg.Failure``. Both callers
then report the outcome with ``events``.
"""
