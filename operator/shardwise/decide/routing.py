"""spec.routing's part of a reconcile: which routing children go, and the `Routed` condition.

The InferencePool and HTTPRoute are children like the Service (render/routing.py renders them,
decide/reconcile.py applies them with the others, ownership conflicts stop everything). Three
things are theirs alone, all pure here:

- Their APIs are add-ons (the Gateway API Inference Extension's CRDs, the Gateway API's). Without
  one, nothing of that kind is created and `Routed` says which API is missing and how to install
  it; serving goes on (routing is how a gateway finds the model, not what serves it). The next
  reconcile after installation creates it, level-triggered.
- The user's gateway writes the pool's and the route's `status.parents[].conditions` (Accepted,
  ResolvedRefs): read back onto `Routed`, so a rejected route or an unresolved picker shows on
  the InferenceDeployment, where the user looks.
- Turning routing (or the route) off deletes the routing children this resource controls.

The body-based router's ConfigMap goes with the pool (render/routing.py says why it exists).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise import conditions
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.conditions import Condition
from shardwise.decide import ownership
from shardwise.render import routing
from shardwise.render.pod import Owner

CONDITION = "Routed"
GIE_VERSION = "v1.5.0"
POOL_NOT_INSTALLED = "InferencePoolNotInstalled"
ROUTE_NOT_INSTALLED = "HTTPRouteNotInstalled"
POOL_MISSING_MESSAGE = (
    f"spec.routing.inferencePool needs the {routing.POOL_API_VERSION} {routing.POOL_KIND} API, which this "
    "cluster does not serve: install the Gateway API Inference Extension CRDs (v1.0.0 or later), e.g. "
    f"`kubectl apply -f https://github.com/kubernetes-sigs/gateway-api-inference-extension/releases/download/"
    f"{GIE_VERSION}/manifests.yaml`; nothing was created for routing, and shardwise creates the "
    "InferencePool on its next reconcile")
ROUTE_MISSING_MESSAGE = (
    f"spec.routing.httpRoute needs the {routing.ROUTE_API_VERSION} {routing.ROUTE_KIND} API, which this "
    "cluster does not serve: install the Gateway API CRDs, e.g. `kubectl apply --server-side -f "
    "https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.4.0/standard-install.yaml`; "
    "the InferencePool was created, the HTTPRoute is created on the next reconcile")

ChildKey = tuple[str, str, str]


def missing_apis(spec: InferenceDeploymentSpec, *, pool_installed: bool, route_installed: bool) -> tuple[str, ...]:
    """Why a routing child spec.routing asks for cannot be created: the reasons of the APIs missing."""
    if routing.pool_enabled(spec) and not pool_installed:
        return (POOL_NOT_INSTALLED,)
    if routing.route_enabled(spec) and not route_installed:
        return (ROUTE_NOT_INSTALLED,)
    return ()


def installable(wanted: list[dict[str, Any]], missing: tuple[str, ...]) -> list[dict[str, Any]]:
    """`wanted` without the routing children whose API the cluster lacks. Without the pool's API
    the route goes too: it would send traffic to a kind nobody serves."""
    dropped = ({routing.POOL_KIND, routing.ROUTE_KIND, routing.BBR_CONFIGMAP_KIND} if POOL_NOT_INSTALLED in missing
               else {routing.ROUTE_KIND} if ROUTE_NOT_INSTALLED in missing else set())
    return [obj for obj in wanted if obj["kind"] not in dropped]


def unwanted(spec: InferenceDeploymentSpec, owner: Owner,
             owned: Mapping[ChildKey, dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Routing children this resource controls that spec.routing no longer asks for."""
    keep = set()
    if routing.pool_enabled(spec):
        keep |= {routing.POOL_KIND, routing.BBR_CONFIGMAP_KIND}
    if routing.route_enabled(spec):
        keep.add(routing.ROUTE_KIND)
    return [obj for (_, kind, _), obj in owned.items()
            if kind not in keep and obj is not None and ownership.is_controlled_by(obj, owner)
            and not obj["metadata"].get("deletionTimestamp")]


def _parent_name(parent: Mapping[str, Any], namespace: str) -> str:
    ref = parent.get("parentRef") or {}
    return f"{ref.get('kind') or 'Gateway'} {ref.get('namespace') or namespace}/{ref.get('name')}"


def _verdict(obj: Mapping[str, Any], namespace: str) -> tuple[bool | None, str, str]:
    """(status, reason, message) of one pool or route from its status.parents: False when any
    parent refused it (Accepted or ResolvedRefs False), True when every parent took it, else Unknown."""
    kind, name = obj.get("kind"), obj["metadata"]["name"]
    parents = ((obj.get("status") or {}).get("parents") or [])
    if not parents:
        return None, "NoParents", (f"no gateway has reported on {kind} {namespace}/{name} yet (status.parents "
                                   "is empty): an HTTPRoute of a Gateway whose implementation supports "
                                   "InferencePool must send traffic to it")
    accepted = []
    unknown = []
    for parent in parents:
        where = _parent_name(parent, namespace)
        found = {c.get("type"): c for c in parent.get("conditions") or []}
        for type_ in ("Accepted", "ResolvedRefs"):
            cond = found.get(type_)
            if cond is not None and cond.get("status") == "False":
                reason = cond.get("reason") or f"Not{type_}"
                return False, reason, f"{kind} {name}: {where}: {type_}=False ({reason}): {cond.get('message', '')}"
            if cond is None or cond.get("status") != "True":
                unknown.append(f"{where}: {type_} {cond.get('status') if cond else 'not reported'}")
        accepted.append(where)
    if unknown:
        return None, "Pending", f"{kind} {name}: " + "; ".join(unknown)
    return True, "Accepted", f"{kind} {name} accepted by {', '.join(accepted)}"


def routed_condition(spec: InferenceDeploymentSpec, owner: Owner, *, missing: tuple[str, ...],
                     pool: dict[str, Any] | None, route: dict[str, Any] | None) -> Condition | None:
    """`Routed` for this reconcile (None: routing is off, the condition goes).

    `pool` and `route` are the children as they will be after the writes (None: not there)."""
    if not routing.pool_enabled(spec):
        return None
    if POOL_NOT_INSTALLED in missing:
        return Condition(CONDITION, False, POOL_NOT_INSTALLED, POOL_MISSING_MESSAGE)
    if pool is None:
        return Condition(CONDITION, None, "InferencePoolNotCreated",
                         f"InferencePool {owner.namespace}/{owner.name} is created with the serving workload")
    for obj in (pool, route):
        if obj is not None and not ownership.is_controlled_by(obj, owner):
            return Condition(CONDITION, False, "ChildConflict", ownership.conflict_message(obj, owner))
    verdicts = [_verdict(pool, owner.namespace)]
    if route is not None:
        verdicts.append(_verdict(route, owner.namespace))
    refused = next((v for v in verdicts if v[0] is False), None)
    if refused is not None:
        return Condition(CONDITION, *refused)
    if ROUTE_NOT_INSTALLED in missing:
        return Condition(CONDITION, False, ROUTE_NOT_INSTALLED, ROUTE_MISSING_MESSAGE)
    pending = next((v for v in verdicts if v[0] is None), None)
    if pending is not None:
        return Condition(CONDITION, *pending)
    return Condition(CONDITION, True, "Accepted", "; ".join(v[2] for v in verdicts))


def with_routed(update: dict[str, Any], condition: Condition | None, *, generation: int | None,
                now: str) -> dict[str, Any]:
    """`update` with `Routed` set (its time kept unless it flips), or removed when routing is off."""
    existing = update.get("conditions") or []
    if condition is None:
        if conditions.find(existing, CONDITION) is None:
            return update
        return {**update, "conditions": [c for c in existing if c["type"] != CONDITION]}
    return {**update, "conditions": conditions.merge(existing, [condition], generation=generation, now=now)}
