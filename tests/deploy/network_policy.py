"""Which connections a set of Kubernetes NetworkPolicies allows, by the rules the Kubernetes API documents
(networking.k8s.io/v1), over plain pods and outside addresses: no cluster is needed to read deploy/production's
policies the way a network plugin enforces them.

- A pod that some policy of its namespace selects for Ingress (or Egress) is isolated that way: only what a rule of
  those policies allows gets in (or out); a pod no policy selects is open.
- A connection needs both ends: the source's egress and the destination's ingress.
- A peer's `podSelector` alone means pods of the policy's own namespace; `namespaceSelector` alone, every pod of the
  namespaces it selects; both, the pods it selects in those namespaces; `ipBlock`, addresses outside the cluster
  (whether it also covers pod IPs differs between plugins, so pods never match one here).
- No `from`/`to` means any peer, no `ports` any port; a port is a number (named ports are refused: the policies here
  name none), with `endPort` for a range, on TCP unless a protocol is given.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Pod:
    name: str
    namespace: str
    labels: Mapping[str, str] = field(hash=False)


@dataclass(frozen=True)
class Address:
    """Somewhere outside the cluster's pods: the object store, the identity provider, the Kubernetes API."""

    name: str
    ip: str


Endpoint = Pod | Address


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A label selector (matchLabels and matchExpressions, all must hold); an empty one selects everything."""
    selector = selector or {}
    if any(labels.get(key) != value for key, value in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, values = expression["key"], expression.get("values") or []
        holds = {
            "In": labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[expression["operator"]]
        if not holds:
            return False
    return True


def _namespace_labels(namespace: str) -> dict[str, str]:
    # Every namespace carries its name as a label (Kubernetes 1.22 and later).
    return {"kubernetes.io/metadata.name": namespace}


def _peer_holds(peer: Mapping[str, Any], policy_namespace: str, endpoint: Endpoint) -> bool:
    if "ipBlock" in peer:
        if not isinstance(endpoint, Address):
            return False
        block = peer["ipBlock"]
        ip = ipaddress.ip_address(endpoint.ip)
        return ip in ipaddress.ip_network(block["cidr"]) and not any(
            ip in ipaddress.ip_network(excepted) for excepted in block.get("except") or []
        )
    if not isinstance(endpoint, Pod):
        return False
    if "namespaceSelector" in peer:
        in_namespace = selects(peer["namespaceSelector"], _namespace_labels(endpoint.namespace))
    else:
        in_namespace = endpoint.namespace == policy_namespace
    return in_namespace and selects(peer.get("podSelector"), endpoint.labels)


def _port_holds(ports: list[Mapping[str, Any]] | None, port: int, protocol: str) -> bool:
    if not ports:
        return True
    for allowed in ports:
        number = allowed.get("port")
        assert number is None or isinstance(number, int), f"named port {number!r}: name a number"
        if allowed.get("protocol", "TCP") != protocol:
            continue
        if number is None or number <= port <= allowed.get("endPort", number):
            return True
    return False


def _isolating(policies: Iterable[Mapping[str, Any]], pod: Pod, direction: str) -> list[Mapping[str, Any]]:
    chosen = []
    for policy in policies:
        spec = policy["spec"]
        assert "policyTypes" in spec, f"{policy['metadata']['name']}: say policyTypes, not leave it to inference"
        in_force = policy["metadata"]["namespace"] == pod.namespace and direction in spec["policyTypes"]
        if in_force and selects(spec["podSelector"], pod.labels):
            chosen.append(policy)
    return chosen


def _let_through(
    policies: Iterable[Mapping[str, Any]], pod: Pod, other: Endpoint, port: int, protocol: str, direction: str
) -> bool:
    """Whether ``pod`` may take (Ingress) or make (Egress) this connection with ``other``."""
    isolating = _isolating(policies, pod, direction)
    if not isolating:
        return True
    rules_key, peers_key = ("ingress", "from") if direction == "Ingress" else ("egress", "to")
    for policy in isolating:
        namespace = policy["metadata"]["namespace"]
        for rule in policy["spec"].get(rules_key) or []:
            peers = rule.get(peers_key)
            if (not peers or any(_peer_holds(peer, namespace, other) for peer in peers)) and _port_holds(
                rule.get("ports"), port, protocol
            ):
                return True
    return False


def allowed(
    policies: Iterable[Mapping[str, Any]], source: Endpoint, destination: Endpoint, port: int, protocol: str = "TCP"
) -> bool:
    """Whether ``source`` may open a connection to ``destination`` on ``port``."""
    policies = list(policies)
    out = not isinstance(source, Pod) or _let_through(policies, source, destination, port, protocol, "Egress")
    into = not isinstance(destination, Pod) or _let_through(policies, destination, source, port, protocol, "Ingress")
    return out and into


def selected(policy: Mapping[str, Any], pods: Iterable[Pod]) -> set[str]:
    """The names of the pods a policy applies to."""
    namespace, selector = policy["metadata"]["namespace"], policy["spec"]["podSelector"]
    return {pod.name for pod in pods if pod.namespace == namespace and selects(selector, pod.labels)}
