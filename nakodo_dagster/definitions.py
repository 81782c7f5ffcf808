"""The code location: assembles assets, checks, jobs, sensors and resources; nothing is decided here."""

import dagster as dg

from nakodo_dagster.assets.campaign_search import campaign_search
from nakodo_dagster.assets.places import import_places, places
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.sensors.failure_sensor import import_failure_sensor
from nakodo_dagster.sensors.import_sensor import import_sensor
from nakodo_dagster.sensors.search_sensor import campaign_search_job, search_sensor

defs = dg.Definitions(
    assets=[places, campaign_search],
    jobs=[import_places, campaign_search_job],
    sensors=[import_sensor, search_sensor, import_failure_sensor],
    resources={
        "store": StoreResource(database=dg.EnvVar("NAKODO_DATABASE")),
        "overture": OvertureResource(
            root=dg.EnvVar("NAKODO_OVERTURE_ROOT"), release=dg.EnvVar("NAKODO_OVERTURE_RELEASE")
        ),
    },
)
