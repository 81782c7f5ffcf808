"""The external systems the code location talks to, each a resource configured from the environment."""

from nakodo_dagster.resources.overture import OvertureResource
from nakodo_dagster.resources.store import StoreResource

__all__ = ["OvertureResource", "StoreResource"]
