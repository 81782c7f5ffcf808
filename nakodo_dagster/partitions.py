"""The partitions the UI shows: places by (area, category), searches by campaign; all registered at run time."""

from __future__ import annotations

import re
from collections.abc import Iterable

import dagster as dg

from nakodo_dagster.errors import InvalidInput

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
    return _unknown(name, keys, set(instance.get_dynamic_partitions(name)))


def _unknown(name: str, keys: Iterable[str], known: set[str]) -> list[dg.AddDynamicPartitionsRequest]:
    new = [key for key in dict.fromkeys(keys) if key not in known]
    return [dg.AddDynamicPartitionsRequest(name, new)] if new else []


_NOT_A_WORD = re.compile(r"[\W_]+")
# Enough of a name to know the campaign by in the partition list, few enough characters for a URL.
_NAME_IN_KEY = 40


def campaign_partition(campaign_id: int, name: str) -> str:
    """A campaign's partition of campaign_search: its id, then its name in lower-case words ("12-paris-cafes"), so
    that a person finds it by name. A campaign's name never changes, so neither does its key."""
    words = _NOT_A_WORD.sub("-", name.lower()).strip("-")[:_NAME_IN_KEY].rstrip("-")
    return f"{campaign_id}-{words}" if words else str(campaign_id)


def campaign_id_of(partition_key: str) -> int:
    """The campaign a campaign_search partition is of: the id its key starts with."""
    head = partition_key.split("-", 1)[0]
    if not head.isdigit():
        raise InvalidInput(
            f"campaign_search partition {partition_key!r} does not start with a campaign id: its keys are a campaign's "
            "id, then its name, as in 12-paris-cafes"
        )
    return int(head)


def campaign_partitions_requests(
    instance: dg.DagsterInstance, campaigns: Iterable[tuple[int, str]]
) -> list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest]:
    """Register the partitions of these (id, name) campaigns the instance does not know yet, and retire the keys
    of the same campaigns registered before keys carried names (the bare id): the partition list then shows each
    campaign once, by name. A retired key's past searches stay in the asset's events, under that key."""
    keys = {campaign_id: campaign_partition(campaign_id, name) for campaign_id, name in campaigns}
    known = set(instance.get_dynamic_partitions(CAMPAIGN_PARTITIONS.name))
    retired = sorted(key for key in known if key.isdigit() and keys.get(int(key), key) != key)
    requests: list[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest] = []
    requests += _unknown(CAMPAIGN_PARTITIONS.name, keys.values(), known)
    if retired:
        requests.append(dg.DeleteDynamicPartitionsRequest(CAMPAIGN_PARTITIONS.name, retired))
    return requests


def apply_partitions_requests(
    instance: dg.DagsterInstance,
    requests: Iterable[dg.AddDynamicPartitionsRequest | dg.DeleteDynamicPartitionsRequest],
) -> None:
    """Carry out partition requests in this process, as the daemon does with a sensor's."""
    for request in requests:
        if isinstance(request, dg.AddDynamicPartitionsRequest):
            instance.add_dynamic_partitions(request.partitions_def_name, list(request.partition_keys))
        else:
            for key in request.partition_keys:
                instance.delete_dynamic_partition(request.partitions_def_name, key)
