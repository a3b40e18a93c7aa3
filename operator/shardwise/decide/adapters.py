"""LoRA adapters on running engines, as plain data: what to load and unload on one replica, how to
read the engine's answers, and what status.adapters and the AdaptersReady condition say.

Adapters are loaded at runtime (vLLM's /v1/load_lora_adapter, VLLM_ALLOW_RUNTIME_LORA_UPDATING),
never rendered into the pod template, so adding or removing one changes no pod and starts no
rollout. The shell (controller/adapters.py) asks each ready replica which adapters it serves
(/v1/models: entries with a parent), acts on `sync_actions`, and records on the pod what the engine
serves and what it refused (two annotations). Reconcile, the one writer of the status, derives
status.adapters from those annotations (`adapter_status`): the engine's own list is the truth, so a
restarted engine that lost its adapters reads as not loaded until the next sync loads them again.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from typing import Any

from shardwise import conditions
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.decide import adaptercache
from shardwise.render import modelcache as mc

LOADED_ANNOTATION = "shardwise.io/loaded-adapters"  # gateway/decide/routes.py LOADED_ADAPTERS_ANNOTATION
FAILURES_ANNOTATION = "shardwise.io/adapter-failures"  # {name: {"reason", "message", "path"}}
CONDITION = "AdaptersReady"

# Reasons under which an adapter may still come; the gateway holds requests for these
# (gateway/decide/routes.py ADAPTER_ON_ITS_WAY) and refuses at once for every other one.
LOADED, LOADING, NO_READY_REPLICA, DOWNLOADING = "Loaded", "Loading", "NoReadyReplica", "Downloading"
WAITING = frozenset({LOADING, NO_READY_REPLICA, DOWNLOADING})
RANK_ABOVE_LIMIT, FILES_MISSING, LOAD_FAILED = "RankAboveLimit", "AdapterFilesMissing", "AdapterLoadFailed"


@dataclasses.dataclass(frozen=True)
class Failure:
    reason: str
    message: str
    path: str  # what was asked for: a new path (a changed spec) is tried again at once


@dataclasses.dataclass(frozen=True)
class Actions:
    unload: tuple[str, ...] = ()
    load: tuple[tuple[str, str], ...] = ()  # (name, path)


def wanted_paths(spec: InferenceDeploymentSpec, ref: mc.CacheRef, claim: Mapping[str, Any] | None) -> dict[str, str]:
    """name -> what the engines load, for the spec's adapters whose files are ready (verified in
    the model's claim, a path in it, or a hub id the engine fetches itself)."""
    return {s.name: path for s in adaptercache.sources(spec)
            if (path := adaptercache.ready_path(s, ref, claim)) is not None}


def with_cache_state(entries: list[dict[str, Any]], where: Mapping[str, adaptercache.Where]) -> list[dict[str, Any]]:
    """Entries of adapter_status with what happened before the engines: an adapter whose files are
    not ready reads as its download or its source's problem; a downloaded one carries its commit."""
    out = []
    for entry in entries:
        found = where.get(entry["name"])
        if found is not None and found.path is None and entry["loadedReplicas"] == 0:
            entry = {**entry, "reason": found.reason, "message": found.message}
        if found is not None and found.commit:
            entry = {**entry, "commit": found.commit}
        out.append(entry)
    return out


NAME_CONFLICT = "AdapterNameConflict"


def _order(infd: Mapping[str, Any]) -> tuple[str, str]:
    meta = infd["metadata"]
    return meta.get("creationTimestamp") or "", meta["name"]


def _served_name(infd: Mapping[str, Any]) -> str:
    return ((infd.get("spec") or {}).get("model") or {}).get("servedName") or infd["metadata"]["name"]


def name_conflicts(own: Mapping[str, Any], neighbours: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Adapter name -> why it is not served, for `own`'s adapters that another deployment of the
    namespace already serves: every base model's name first, then adapters, the older deployment
    first (the gateway's rule, gateway/routes.build_table)."""
    own_name = own["metadata"]["name"]
    others = [o for o in neighbours if o["metadata"]["name"] != own_name and not o["metadata"].get("deletionTimestamp")]
    holders: dict[str, tuple[str, str]] = {}  # name -> (deployment, "the base model" | "an adapter")
    for infd in sorted(others, key=_order):
        holders.setdefault(_served_name(infd), (infd["metadata"]["name"], "the base model"))
    for infd in sorted([*others, own], key=_order):
        for name in _adapter_names(infd):
            holders.setdefault(name, (infd["metadata"]["name"], "an adapter"))
    return {name: f"the name {name!r} is already {holders[name][1]} of {holders[name][0]} in this namespace: "
                  "rename the adapter (a client could not tell the two apart)"
            for name in _adapter_names(own) if holders[name][0] != own_name}


def _adapter_names(infd: Mapping[str, Any]) -> list[str]:
    return [str(a["name"]) for a in (infd.get("spec") or {}).get("adapters") or ()
            if isinstance(a, dict) and a.get("name")]


def served_adapters(models: Mapping[str, Any]) -> dict[str, str]:
    """name -> root (the path it was loaded from) of the adapters in an engine's /v1/models answer."""
    return {str(m["id"]): str(m.get("root") or "") for m in models.get("data") or ()
            if isinstance(m, dict) and m.get("id") and m.get("parent")}


def sync_actions(wanted: Mapping[str, str], served: Mapping[str, str], failed: Mapping[str, Failure],
                 retry: frozenset[str] = frozenset()) -> Actions:
    """What to do on one replica so that it serves `wanted` (name -> path) and nothing else.

    An adapter served from another path than the spec now gives is unloaded and loaded again. A
    refused load is not asked again for the same path (the engine would refuse it again) unless
    the shell's backoff lists it in `retry`."""
    unload = sorted(name for name, root in served.items() if name not in wanted or _moved(root, wanted[name]))
    load = [(name, path) for name, path in sorted(wanted.items())
            if (name not in served or name in unload)
            and (name not in failed or failed[name].path != path or name in retry)]
    return Actions(unload=tuple(unload), load=tuple(load))


def _moved(root: str, path: str) -> bool:
    # The engine answers a hub id with the folder it downloaded it to: only a path compares.
    return path.startswith("/") and root != path


def classify_refusal(status: int, body: str, path: str) -> Failure | None:
    """The engine's answer to a load, as a Failure (None: it is loaded, or already was)."""
    if 200 <= status < 300:
        return None
    try:
        message = str(json.loads(body)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        message = body.strip()[:300] or f"HTTP {status}"
    if status == 400 and "already been loaded" in message:
        return None  # another sync loaded it first
    if "greater than max_lora_rank" in message:
        # vLLM: "Worker failed with error 'LoRA rank 16 is greater than max_lora_rank 8.'"
        inner = message.split("'")[1] if message.count("'") >= 2 else message
        return Failure(RANK_ABOVE_LIMIT, f"{inner.rstrip('.')}: raise spec.lora.maxLoraRank or use a smaller rank",
                       path)
    if status == 404 or "No adapter found" in message:
        return Failure(FILES_MISSING, f"no adapter files at {path}: {message}", path)
    return Failure(LOAD_FAILED, f"HTTP {status}: {message}", path)


# -- the pod annotations ---------------------------------------------------------------------

def annotations(served: Iterable[str], failed: Mapping[str, Failure]) -> dict[str, str | None]:
    """The two annotations for a replica (None removes one): compact and ordered, so an unchanged
    state gives byte-identical values and no write."""
    names = ",".join(sorted(served))
    failures = {name: dataclasses.asdict(f) for name, f in sorted(failed.items())}
    return {LOADED_ANNOTATION: names or None,
            FAILURES_ANNOTATION: json.dumps(failures, separators=(",", ":"), sort_keys=True) if failures else None}


def loaded_on(pod: Mapping[str, Any]) -> frozenset[str]:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(LOADED_ANNOTATION) or ""
    return frozenset(n.strip() for n in text.split(",") if n.strip())


def failures_on(pod: Mapping[str, Any]) -> dict[str, Failure]:
    text = ((pod.get("metadata") or {}).get("annotations") or {}).get(FAILURES_ANNOTATION)
    try:
        raw = json.loads(text) if text else {}
        return {str(k): Failure(str(v["reason"]), str(v["message"]), str(v.get("path") or ""))
                for k, v in raw.items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}  # not ours to trust: the next sync writes it again


# -- status.adapters -------------------------------------------------------------------------

def adapter_status(names: Iterable[str], serving_pods: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """status.adapters, one entry per spec adapter, from the ready serving replicas' annotations."""
    out = []
    replicas = len(serving_pods)
    for name in names:
        loaded = sum(1 for pod in serving_pods if name in loaded_on(pod))
        failure = next((f for pod in serving_pods if name not in loaded_on(pod)
                        for n, f in failures_on(pod).items() if n == name), None)
        if replicas == 0:
            reason, message = NO_READY_REPLICA, "no ready replica to load it on yet"
        elif loaded == replicas:
            reason, message = LOADED, f"loaded on all {replicas} ready replica{'s' if replicas > 1 else ''}"
        elif failure is not None:
            reason, message = failure.reason, failure.message
        else:
            reason, message = LOADING, f"loaded on {loaded} of {replicas} ready replicas"
        out.append({"name": name, "loadedReplicas": loaded, "replicas": replicas, "reason": reason,
                    "message": message})
    return out


def condition(entries: list[dict[str, Any]]) -> conditions.Condition:
    """AdaptersReady: True when every adapter is loaded on every ready replica; else the first
    failure's reason (a person must act), else Loading."""
    failed = [e for e in entries if e["reason"] != LOADED and e["reason"] not in WAITING]
    if failed:
        return conditions.Condition(CONDITION, False, failed[0]["reason"],
                                    "; ".join(f"{e['name']}: {e['message']}" for e in failed))
    waiting = [e for e in entries if e["reason"] != LOADED]
    if waiting:
        return conditions.Condition(CONDITION, False, "AdaptersLoading",
                                    "; ".join(f"{e['name']}: {e['message']}" for e in waiting))
    return conditions.Condition(CONDITION, True, "AdaptersLoaded",
                                f"{len(entries)} adapter{'s' if len(entries) != 1 else ''} loaded on every ready replica")


def is_failure(reason: str) -> bool:
    return reason not in ("AdaptersLoaded", "AdaptersLoading")
