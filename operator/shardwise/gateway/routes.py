"""The model table: which served model name goes to which ready engine endpoints.

Pure: built from InferenceDeployments and pods as plain dicts (the informers' stores), so every
rule here is a unit test away. A pod serves only when it is Ready and not terminating; of a
multi-node group only the leader (LeaderWorkerSet worker index 0) serves the OpenAI API. Two
deployments claiming one served name: the oldest keeps it (as a Service's first claim would), the
others are reported as conflicts rather than silently merged into one pool of different engines.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

INSTANCE_LABEL = "shardwise.io/inference-deployment"  # render/labels.py INSTANCE_LABEL
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
ENGINE_PORT = 8000  # render/vllm_args.py VLLM_PORT

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


def _ready(pod: Obj) -> bool:
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    if meta.get("deletionTimestamp") or not status.get("podIP"):
        return False
    labels = meta.get("labels") or {}
    if labels.get(WORKER_INDEX_LABEL, "0") != "0":  # a multi-node worker: only the leader serves
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def endpoints_by_deployment(pods: Iterable[Obj]) -> dict[tuple[str, str], tuple[str, ...]]:
    """(namespace, deployment name) -> sorted IP:PORT of its serving pods."""
    out: dict[tuple[str, str], set[str]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        owner = (meta.get("labels") or {}).get(INSTANCE_LABEL)
        if owner and _ready(pod):
            out.setdefault((meta.get("namespace") or "", owner), set()).add(f"{pod['status']['podIP']}:{ENGINE_PORT}")
    return {key: tuple(sorted(values)) for key, values in out.items()}


def build_table(infds: Iterable[Obj], pods: Iterable[Obj]) -> Table:
    """The whole table from the two stores (deterministic whatever their order)."""
    endpoints = endpoints_by_deployment(pods)
    routes: dict[str, Route] = {}
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
                              usd_per_million_output_tokens=_price(infd))
    return Table(routes=routes, conflicts=tuple(conflicts))


def _price(infd: Obj) -> float | None:
    value = ((infd.get("status") or {}).get("cost") or {}).get("perMillionOutputTokensUSD")
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 else None
