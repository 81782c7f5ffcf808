"""The partitions the UI shows: places by (area, category), searches by campaign; all registered at run time."""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

AREA = "area"
CATEGORY = "category"

AREA_PARTITIONS = dg.DynamicPartitionsDefinition(name=AREA)
CATEGORY_PARTITIONS = dg.DynamicPartitionsDefinition(name=CATEGORY)
PLACES_PARTITIONS = dg.MultiPartitionsDefinition({AREA: AREA_PARTITIONS, CATEGORY: CATEGORY_PARTITIONS})
CAMPAIGN_PARTITIONS = dg.DynamicPartitionsDefinition(name="campaign")


def places_partition(area: str, category: str) -> dg.MultiPartitionKey:
    """The places partition of one (area, category) pair."""
    return dg.MultiPartitionKey({AREA: area, CATEGORY: category})


def new_partitions_request(
    instance: dg.DagsterInstance, name: str, keys: Iterable[str]
) -> list[dg.AddDynamicPartitionsRequest]:
    """A request to register, in the order given, the keys the instance does not know yet; nothing if none."""
    known = set(instance.get_dynamic_partitions(name))
    new = [key for key in dict.fromkeys(keys) if key not in known]
    return [dg.AddDynamicPartitionsRequest(name, new)] if new else []
