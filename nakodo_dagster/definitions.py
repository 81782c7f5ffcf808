"""The code location: assembles assets, checks, jobs, sensors and resources; nothing is decided here."""

import dagster as dg

from nakodo_dagster.assets.campaign_search import campaign_search, search_campaigns_job
from nakodo_dagster.assets.places import import_places, places
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.failure_sensor import import_cancel_sensor, import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import search_sensor

defs = dg.Definitions(
    assets=[places, campaign_search],
    jobs=[import_places, search_campaigns_job],
    sensors=[import_sensor, search_sensor, import_failure_sensor, import_cancel_sensor],
    resources={
        "store": StoreResource(database=dg.EnvVar("NAKODO_DATABASE")),
        "overture": OvertureResource(
            root=dg.EnvVar("NAKODO_OVERTURE_ROOT"), release=dg.EnvVar("NAKODO_OVERTURE_RELEASE")
        ),
    },
)
