"""The code location: assembles assets, checks, jobs, sensors and resources; nothing is decided here."""

import warnings

import dagster as dg

from nakodo_dagster.assets.campaign_search import campaign_search
from nakodo_dagster.assets.coverage import places_coverage_sensor
from nakodo_dagster.assets.places import places
from nakodo_dagster.jobs.by_hand import reimport_places, search_campaigns_by_hand
from nakodo_dagster.jobs.import_places import import_places
from nakodo_dagster.jobs.roll_out import roll_out_release
from nakodo_dagster.jobs.search_campaigns import search_campaigns_job
from nakodo_dagster.resources import configured_resources
from nakodo_dagster.sensors.failure_sensor import import_cancel_sensor, import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import search_sensor

defs = dg.Definitions(
    assets=[places, campaign_search],
    jobs=[import_places, search_campaigns_job, reimport_places, search_campaigns_by_hand, roll_out_release],
    sensors=[import_sensor, search_sensor, import_failure_sensor, import_cancel_sensor, places_coverage_sensor],
    resources=configured_resources(),
)

# Dagster 1.13 copies every sensor that targets a job when it binds the resources, and hands the copy the
# sensor's empty owners list, a beta parameter: a BetaWarning per sensor per process about nothing set here (37 in
# `make run`'s terminal). The repository is built once, here, with that one warning silenced; Dagster caches it.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"Parameter `owners` of initializer `SensorDefinition", dg.BetaWarning)
    defs.get_repository_def()
