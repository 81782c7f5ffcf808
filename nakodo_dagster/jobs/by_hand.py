"""The asset jobs of the two assets the sensors keep fresh: what a person launches by hand, and what names each
sensor as its asset's automation in the UI (Dagster lists a sensor on an asset's page only if one of its targets
materialises the asset; the runs the sensors launch are the op jobs beside them)."""

import dagster as dg

from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.search import CAMPAIGN_SEARCH

reimport_places = dg.define_asset_job(
    "reimport_places",
    selection=[PLACES],
    description="Re-import the chosen places partitions by hand, whatever they hold, a block or a country at a time.",
)

search_campaigns_by_hand = dg.define_asset_job(
    "search_campaigns_by_hand",
    selection=[CAMPAIGN_SEARCH],
    description="Search the chosen campaigns now, each its campaign_search partition.",
)
