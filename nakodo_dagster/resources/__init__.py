"""The external systems the code location talks to, each a resource configured from the environment."""

from nakodo_dagster.resources.overture import OvertureResource
from nakodo_dagster.resources.store import StoreResource
from nakodo_dagster.settings import setting

__all__ = ["OvertureResource", "StoreResource", "configured_resources"]


def configured_resources() -> dict[str, StoreResource | OvertureResource]:
    """The code location's resources as the environment configures them now: a variable that is set is read
    through ``dg.EnvVar`` when a run or a tick uses it, an unset one is its default in code (``settings``)."""
    return {
        "store": StoreResource(database=setting("NAKODO_DATABASE")),
        "overture": OvertureResource(
            root=setting("NAKODO_OVERTURE_ROOT"),
            release=setting("NAKODO_OVERTURE_RELEASE"),
            index=setting("NAKODO_OVERTURE_INDEX"),
            changelog=setting("NAKODO_OVERTURE_CHANGELOG"),
            queue_minutes=setting("NAKODO_IMPORT_QUEUE_MINUTES"),
        ),
    }
