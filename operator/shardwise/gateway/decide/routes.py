"""The model table: which served model name goes to which ready engine endpoints.

Pure: built from InferenceDeployments and pods as plain dicts (the informers' stores), so every
rule here is a unit test away. A pod serves only when it is Ready and not terminating; of a
multi-node group only the leader (LeaderWorkerSet worker index 0) serves the OpenAI API. Two
deployments claiming one served name: the oldest keeps it (as a Service's first claim would), the
others are reported as conflicts rather than silently merged into one pool of different engines.

A LoRA adapter (spec.adapters) is a served name of its own that goes to its base deployment, but
only to the replicas that have it loaded: the operator loads adapters at runtime and writes the
names each engine answered in its `/v1/models` on the pod (LOADED_ADAPTERS_ANNOTATION); any other
replica would answer 404. While no replica has it yet the route is waking (the request is held,
as for a deployment scaled to zero), unless status.adapters says it cannot load (its rank is above
the limit, its files are missing): that is answered at once with the reason. Base models' names are
claimed before any adapter's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from shardwise.gateway.decide import spillover as spillover_

INSTANCE_LABEL = "shardwise.io/inference-deployment"  # render/labels.py INSTANCE_LABEL
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
ROLE_LABEL = "shardwise.io/role"  # render/disaggregation.py ROLE_LABEL
ENGINE_PORT = 8000  # render/vllm_args.py VLLM_PORT
# Comma-separated adapter names the engine of this pod serves (written by controller/adapters.py).
LOADED_ADAPTERS_ANNOTATION = "shardwise.io/loaded-adapters"

Obj = Mapping[str, Any]


@dataclasses.dataclass(frozen=True)
class Route:
    """One served model: where it lives and which endpoints (IP:PORT) serve it now."""

    model: str
    namespace: str
    name: str
    endpoints: tuple[str, ...]
    scale_to_zero: bool
    desired_replicas: int  # status.desiredReplicas, else what the spec asks for
    created: str = ""
    usd_per_million_output_tokens: float | None = None  # status.cost.perMillionOutputTokensUSD
    base: str | None = None  # for a LoRA adapter: the served name of the model it adapts
    unavailable: str | None = None  # for an adapter no replica can load: status.adapters' message
    # A disaggregated pair: its ready prefill engines (the request's prefill goes there first,
    # decide/disaggregation.py) and each engine's node (prefill near its decode engine).
    prefill_endpoints: tuple[str, ...] = ()
    nodes: tuple[tuple[str, str], ...] = ()  # (IP:PORT, node name), every engine of the deployment
    spillover: spillover_.Spillover | None = None  # spec.spillover: a provider's model while waking

    @property
    def waking(self) -> bool:
        """No endpoint yet, but one is coming or may be asked for: hold rather than refuse."""
        return not self.endpoints and (self.scale_to_zero or self.desired_replicas > 0)


@dataclasses.dataclass(frozen=True)
class Table:
    routes: Mapping[str, Route]
    conflicts: tuple[str, ...] = ()  # one sentence per deployment that lost its served name

    def get(self, model: str) -> Route | None:
        return self.routes.get(model)

    def models(self) -> list[Route]:
        return [self.routes[k] for k in sorted(self.routes)]


def served_name(infd: Obj) -> str:
    """spec.model.servedName or metadata.name, as render/vllm_args.served_model_name."""
    spec = infd.get("spec") or {}
    return ((spec.get("model") or {}).get("servedName") or infd["metadata"]["name"])


def _ready(pod: Obj, *, prefill: bool = False) -> bool:
    """Serving callers (prefill=True: a prefill engine counts too, for the P/D split)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or not status.get("podIP"):
        return False
    labels = meta.get("labels") or {}
    if labels.get(WORKER_INDEX_LABEL, "0") != "0":  # a multi-node worker: only the leader serves
        return False
    # A disaggregated pair answers callers from its decode engines (they prefill themselves when no
    # prefill engine handed them the KV), as the model's Service does; a prefill engine only
    # produces KV for them, so a whole request sent there would bypass the split.
    if labels.get(ROLE_LABEL) == "prefill" and not prefill:
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def endpoints_by_deployment(pods: Iterable[Obj]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(namespace, deployment name) -> sorted IP:PORT of its serving pods."""
    return {key: tuple(sorted(by_endpoint)) for key, by_endpoint in _serving_pods(pods).items()}


def loaded_adapters(pod: Obj) -> frozenset[str]:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(LOADED_ADAPTERS_ANNOTATION) or ""
    return frozenset(name.strip() for name in text.split(",") if name.strip())


def _serving_pods(pods: Iterable[Obj]) -> dict[tuple[str, str], dict[str, frozenset[str]]]:
    """(namespace, deployment name) -> {IP:PORT: adapters loaded there} of its serving pods."""
    out: dict[tuple[str, str], dict[str, frozenset[str]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(INSTANCE_LABEL)
        if owner and _ready(pod):
            endpoint = f"{pod['status']['podIP']}:{ENGINE_PORT}"
            out.setdefault((meta.get("namespace") or "", owner), {})[endpoint] = loaded_adapters(pod)
    return out


# status.adapters[].reason values under which an adapter may still come (everything else is a failure).
ADAPTER_ON_ITS_WAY = frozenset({"Loaded", "Loading", "Downloading", "NoReadyReplica"})


def adapter_failures(infd: Obj) -> dict[str, str]:
    """Adapter name -> why no replica can load it, from status.adapters."""
    out = {}
    for entry in (infd.get("status") or {}).get("adapters") or ():
        if isinstance(entry, dict) and entry.get("name") and entry.get("reason") \
                and entry["reason"] not in ADAPTER_ON_ITS_WAY:
            out[str(entry["name"])] = str(entry.get("message") or entry["reason"])
    return out


def adapter_names(infd: Obj) -> list[str]:
    """spec.adapters[].name, in the spec's order."""
    return [str(a["name"]) for a in (infd.get("spec") or {}).get("adapters") or () if isinstance(a, dict) and a.get("name")]


def _prefill_pods(pods: Iterable[Obj]) -> tuple[dict[tuple[str, str], tuple[str, ...]],
                                                 dict[tuple[str, str], tuple[tuple[str, str], ...]]]:
    """(namespace, deployment) -> its ready prefill engines, and -> (endpoint, node) of every ready
    engine (either role) whose pod names its node."""
    prefill: dict[tuple[str, str], set[str]] = {}
    nodes: dict[tuple[str, str], set[tuple[str, str]]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        owner = labels.get(INSTANCE_LABEL)
        if not owner or not _ready(pod, prefill=True):
            continue
        key, endpoint = (meta.get("namespace") or "", owner), f"{pod['status']['podIP']}:{ENGINE_PORT}"
        if labels.get(ROLE_LABEL) == "prefill":
            prefill.setdefault(key, set()).add(endpoint)
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            nodes.setdefault(key, set()).add((endpoint, node))
    return ({k: tuple(sorted(v)) for k, v in prefill.items()}, {k: tuple(sorted(v)) for k, v in nodes.items()})


def build_table(infds: Iterable[Obj], pods: Iterable[Obj]) -> Table:
    """The whole table from the two stores (deterministic whatever their order)."""
    pods = list(pods)
    serving = _serving_pods(pods)
    prefill, nodes = _prefill_pods(pods)
    endpoints = {key: tuple(sorted(by_endpoint)) for key, by_endpoint in serving.items()}
    routes: dict[str, Route] = {}
    bases: list[tuple[Route, Obj]] = []
    conflicts: list[str] = []
    ordered = sorted(infds, key=lambda o: (o["metadata"].get("creationTimestamp") or "",
                                           o["metadata"].get("namespace") or "", o["metadata"]["name"]))
    for infd in ordered:
        meta = infd["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        model, ns = served_name(infd), meta.get("namespace") or ""
        holder = routes.get(model)
        if holder is not None:
            conflicts.append(f"{ns}/{meta['name']}: served name {model!r} is already served by "
                             f"{holder.namespace}/{holder.name}")
            continue
        spec = infd.get("spec") or {}
        autoscaling = spec.get("autoscaling") or {}
        desired = (infd.get("status") or {}).get("desiredReplicas")
        if desired is None:  # not yet reconciled: what the spec asks for (the CRD's defaults)
            desired = spec.get("replicas", autoscaling.get("minReplicas", 1))
        routes[model] = Route(model=model, namespace=ns, name=meta["name"],
                              endpoints=endpoints.get((ns, meta["name"]), ()),
                              scale_to_zero=autoscaling.get("minReplicas") == 0,
                              desired_replicas=int(desired),
                              created=meta.get("creationTimestamp") or "",
                              usd_per_million_output_tokens=_price(infd),
                              prefill_endpoints=prefill.get((ns, meta["name"]), ()),
                              nodes=nodes.get((ns, meta["name"]), ()),
                              spillover=spillover_.of(spec.get("spillover"), ns))
        bases.append((routes[model], infd))
    for base, infd in bases:  # adapters only once every base model has its name
        failures = adapter_failures(infd)
        for adapter in adapter_names(infd):
            holder = routes.get(adapter)
            if holder is not None:
                conflicts.append(f"{base.namespace}/{base.name}: adapter name {adapter!r} is already served by "
                                 f"{holder.namespace}/{holder.name}")
                continue
            having = serving.get((base.namespace, base.name), {})
            loaded_on = tuple(sorted(e for e, loaded in having.items() if adapter in loaded))
            # prefill_endpoints=(): a prefill engine may not have the adapter loaded; decode does both.
            routes[adapter] = dataclasses.replace(base, model=adapter, base=base.model, endpoints=loaded_on,
                                                  prefill_endpoints=(),
                                                  unavailable=None if loaded_on else failures.get(adapter))
    return Table(routes=routes, conflicts=tuple(conflicts))


def _price(infd: Obj) -> float | None:
    value = ((infd.get("status") or {}).get("cost") or {}).get("perMillionOutputTokensUSD")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None
