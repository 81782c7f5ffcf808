"""A campaign's businesses, nearest first, added from whatever has landed while the rest is fetched.

The search sensor asks for one run of ``search_campaigns_job`` for every campaign due at a tick, so the runs per
hour do not grow with the campaigns; each campaign still gets a materialisation of its own ``campaign_search``
partition. An analyst materialises one partition from the UI through the asset itself. Both search through
``nakodo_dagster.search``.
"""

import dagster as dg

from nakodo_dagster.imports.events import PLACES
from nakodo_dagster.partitions import CAMPAIGN_PARTITIONS, campaign_id_of
from nakodo_dagster.resources import OvertureResource, StoreResource
from nakodo_dagster.search import MAP, MAP_DRAWN_AT, search_campaigns
from nakodo_dagster.words import plural

CAMPAIGN_SEARCH_DESCRIPTION = (
    "A campaign's businesses, nearest first, each once, new ones added as their areas land.\n\n"
    f"**The map**: every materialisation's `{MAP}` entry shows the campaign's map (its areas by import state, its "
    "businesses, the land and borders around): the picture itself, behind [Show Markdown], when what it shows "
    f"changed; otherwise a link to the materialisation that drew it (`{MAP_DRAWN_AT}` says when). A campaign's "
    "latest: the Partitions tab, its partition (its id, then its name in words: `12-paris-cafes`)."
)


@dg.asset(
    partitions_def=CAMPAIGN_PARTITIONS,
    deps=[dg.AssetDep(PLACES, partition_mapping=dg.AllPartitionMapping())],
    group_name="campaigns",
    kinds={"duckdb", "python"},
    description=CAMPAIGN_SEARCH_DESCRIPTION,
)
def campaign_search(
    context: dg.AssetExecutionContext, store: StoreResource, overture: OvertureResource
) -> dg.MaterializeResult:
    """Search one campaign by hand and draw its map; see CAMPAIGN_SEARCH_DESCRIPTION."""
    [(_, metadata)] = search_campaigns(
        store.store,
        context.instance,
        overture.off_reason,
        [campaign_id_of(context.partition_key)],
        context.log,
        always_map=True,
    )
    context.log.info(
        f"Added {plural(metadata['businesses_added'], 'business', 'businesses')} "
        f"({metadata['businesses_total']:,} in all); {plural(metadata['pending_areas'], 'area')} still on their way"
    )
    return dg.MaterializeResult(metadata=metadata)
