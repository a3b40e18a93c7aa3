"""One reconcile's whole decision, from a snapshot the shell gathered: pure.

    decide(snapshot) -> Decision: the objects to apply, delete or annotate, the status patch and
    the events, and whether to come back at once.

Steps, in order: validate the spec (an invalid one touches nothing and says why); keep or make
the plan (planning.py); decide the model cache (modelcache.py: no serving pod before the weights
are verified); render the children and keep only those whose live state lacks what we want,
touching nothing at all if any existing child is not controlled by this resource (ownership.py);
stamp the rollout strategy on a changed workload (rollouts.py); remove a workload of the other
kind once the new one serves; and derive the whole status at once (progress.py, cachestate.py),
as the API server will hold it after the writes. The patch is the difference from the stored
status; nothing changes, nothing is written, no event is posted.

A child is written only once its name was looked up (someone else's namesake must be seen first).
The shell looks up the names the stored plan implies; when a new plan wants a name it has not
seen, decide answers with `lookups` and nothing else, and the shell reads them and decides again
from the start. Either way every read comes before the decision acted on, every write after it.

Two things only the writes can tell: a child the API server refuses (a quota, an invalid object)
and a kind it does not serve after all. The shell then decides again from the same snapshot with
the refusal in it (`Refused`), and writes that status instead; it reads nothing in between.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
from collections.abc import Mapping
from typing import Any

import pydantic

from shardwise import conditions
from shardwise.api import v1alpha1 as api
from shardwise.decide import adaptercache, adapters, cachestate, missing_api, modelcache, ownership, planning, progress, rollouts
from shardwise.decide import live_status, scaling_status
from shardwise.decide import routing as routing_status
from shardwise.decide.transitions import Announcement, transitions
from shardwise.decide.workload_health import Failure
from shardwise.kube.compare import contains, merge_patch
from shardwise.planner import plans
from shardwise.planner.models import ModelArch
from shardwise.api import names
from shardwise.render import children, disaggregation, engine, leaderworkerset, routing
from shardwise.render.labels import WAKE_ANNOTATION
from shardwise.render import modelcache as mc

ChildKey = tuple[str, str, str]  # (apiVersion, kind, name)
WORKLOAD_KINDS = ("Deployment", "LeaderWorkerSet")


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Everything one reconcile reads, gathered before it decides anything."""

    infd: dict[str, Any]
    now: str  # RFC 3339, read once: only a condition that flips takes it
    nodes: list[dict[str, Any]]
    gpu_pods: list[dict[str, Any]]  # every pod holding GPUs, cluster-wide, this deployment's included
    pods: list[dict[str, Any]]  # this deployment's pods
    # Children looked up by name, namesakes of other owners included (None: nothing there).
    children: Mapping[ChildKey, dict[str, Any] | None]
    # Workloads of either kind that carry our label (the cache's): the running one and the replaced one.
    owned_workloads: Mapping[ChildKey, dict[str, Any] | None]
    lws_installed: bool
    cache: modelcache.CacheInputs | None = None  # None when the spec is invalid
    prices: Mapping[str, float] | None = None  # read when a plan is made
    learned: Mapping[str, plans.Correction] | None = None
    # Read from the model's config.json when a plan is made and the catalog lacks the model.
    architecture: ModelArch | None = None
    architecture_failure: tuple[str, str] | None = None
    runtime_image: str | None = None
    engine_images: Mapping[str, str] = dataclasses.field(default_factory=dict)  # by engine name
    downloader_image: str = ""
    # spec.routing: are the InferencePool and HTTPRoute APIs served, and the routing children
    # carrying our label (the cache's), to delete when spec.routing stops asking for them.
    pool_installed: bool = True
    route_installed: bool = True
    owned_routing: Mapping[ChildKey, dict[str, Any] | None] = dataclasses.field(default_factory=dict)
    # The namespace's other InferenceDeployments (read when this one has adapters): their names.
    neighbours: tuple[dict[str, Any], ...] = ()


@dataclasses.dataclass(frozen=True)
class Apply:
    obj: dict[str, Any]
    force: bool  # only on objects we control: a create is not forced, so a namesake made since conflicts


@dataclasses.dataclass(frozen=True)
class Refused:
    """What the writes learned: a permanent refusal, the LeaderWorkerSet API missing after all."""

    failure: Failure | None = None
    lws_missing: bool = False
    keys: frozenset[ChildKey] = frozenset()  # the objects refused: their live state did not change


@dataclasses.dataclass(frozen=True)
class Decision:
    lookups: tuple[ChildKey, ...] = ()  # names to look up first; nothing else is decided then
    apply: tuple[Apply, ...] = ()
    delete: tuple[dict[str, Any], ...] = ()  # each controlled by us, deleted with a uid precondition
    annotate: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = ()  # (object, metadata merge patch)
    status: dict[str, Any] | None = None  # the whole status as it should read after the writes
    status_patch: dict[str, Any] = dataclasses.field(default_factory=dict)
    events: tuple[Announcement, ...] = ()  # posted once the status patch is written
    failure: Failure | None = None
    requeue: bool = False


def key_of(obj: Mapping[str, Any]) -> ChildKey:
    return obj["apiVersion"], obj["kind"], obj["metadata"]["name"]


def child_keys(name: str) -> list[ChildKey]:
    """Every child a deployment may have: its Service, a workload of either kind, and the routing
    objects (an InferencePool, an HTTPRoute, the body-based router's ConfigMap)."""
    return [("v1", "Service", names.service_name(name)), *children.workload_candidates(name),
            *routing.candidates(name)]


def role_keys(name: str) -> list[ChildKey]:
    """A disaggregated deployment's own children: each role's Deployment and the prefill Service
    (the model's Service keeps its name and selects the decode pods)."""
    return [*(("apps/v1", "Deployment", disaggregation.role_name(name, role)) for role in disaggregation.ROLES),
            ("v1", "Service", disaggregation.role_name(name, disaggregation.PREFILL))]


def workload_keys(name: str) -> list[ChildKey]:
    """Every workload a deployment may own, aggregated or per role: the one serving stays, the
    others go once it serves (a re-plan across kinds, a switch into or out of disaggregation)."""
    return [key for key in child_keys(name) + role_keys(name) if key[1] in WORKLOAD_KINDS]


def routing_keys(name: str) -> list[ChildKey]:
    return routing.candidates(name)


def keys_to_check(name: str, stored_plan: Mapping[str, Any] | None, *, lws_installed: bool,
                  spec: api.InferenceDeploymentSpec | None = None, pool_installed: bool = True,
                  route_installed: bool = True) -> list[ChildKey]:
    """The children whose names the shell looks up, namesakes included, before deciding: the
    Service, the workload kind of the stored plan (a Deployment while there is none), and the
    routing objects spec.routing asks for whose API is served."""
    multi_node = bool(stored_plan and stored_plan.get("feasible") and int(stored_plan.get("nodesPerReplica") or 1) > 1)
    service, deployment, lws, pool, route, bbr_models = child_keys(name)
    keys = ([service, lws] if lws_installed else [service]) if multi_node else [service, deployment]
    if spec is not None and disaggregation.enabled(spec):
        keys = [service, *role_keys(name)]
    if spec is not None and routing.pool_enabled(spec) and pool_installed:
        keys += [pool, bbr_models]
        if routing.route_enabled(spec) and route_installed:
            keys.append(route)
    return keys


def parse_spec(infd: Mapping[str, Any]) -> api.InferenceDeploymentSpec | str:
    """The spec, or the sentence that says which field is wrong."""
    try:
        return api.InferenceDeploymentSpec.model_validate(infd.get("spec") or {})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        if not first["loc"]:  # a rule across fields (a model validator): its sentence names them itself
            return str(first["msg"]).removeprefix("Value error, ")
        return f"spec.{'.'.join(map(str, first['loc']))}: {first['msg']}"


def wants_new_plan(infd: Mapping[str, Any], spec: api.InferenceDeploymentSpec, nodes: list[dict[str, Any]]) -> bool:
    """Will this reconcile plan? (Then the shell reads the prices and learned corrections too.)"""
    current = (infd.get("status") or {}).get("plan")
    return planning.needs_new_plan(current, planning.planning_fingerprint(spec),
                                   planning.replan_token(infd["metadata"]), nodes)


def decide(snapshot: Snapshot, refused: Refused | None = None) -> Decision:
    infd = snapshot.infd
    meta, stored = infd["metadata"], infd.get("status") or {}
    generation, now = meta.get("generation"), snapshot.now
    spec = parse_spec(infd)
    if isinstance(spec, str):
        return _with_status(stored, progress.invalid_spec_status(stored, spec, generation=generation, now=now))
    refused = refused or Refused()
    owner = children.Owner(name=meta["name"], namespace=meta["namespace"], uid=meta["uid"])
    if snapshot.cache is not None and spec.adapters:  # ranks the downloads stamped on the claim
        spec = adaptercache.with_known_ranks(spec, {s.name: adaptercache.locate(
            s, snapshot.cache.ref, cache_ready=False, claim=snapshot.cache.claim, job=None, job_pods=[])
            for s in adaptercache.sources(spec)})
    plan = _plan(snapshot, spec)
    cannot = engine.plan_problem(spec, plan)
    if cannot is not None:  # never a half-rendered group: say so before creating anything
        return _with_status(stored, progress.invalid_spec_status(
            stored, cannot, generation=generation, now=now, reason="EngineCannotServe"))
    desired = progress.desired_replicas(spec, stored)
    # An autoscaled role runs what the autoscaler last decided for it (status.autoscaling.roles).
    spec = scaling_status.with_role_replicas(spec, stored)

    applies: list[Apply] = []
    deletes: list[dict[str, Any]] = []
    annotate: list[tuple[dict[str, Any], dict[str, Any]]] = []
    requeue = False
    failure, lws_missing = refused.failure, refused.lws_missing
    workload = rendered_workload = None
    roles: dict[str, dict[str, Any] | None] = {}  # disaggregated: each role's workload after the writes
    cache: cachestate.CacheView | None = None
    missing_routing = routing_status.missing_apis(spec, pool_installed=snapshot.pool_installed,
                                                  route_installed=snapshot.route_installed)
    routed: dict[str, dict[str, Any] | None] = {}  # the routing children as they will be after the writes
    if plan.get("feasible") and snapshot.cache is not None:
        cache_ref = snapshot.cache.ref
        token = spec.model.hfTokenSecretRef
        chosen = modelcache.decide(snapshot.cache, plan, namespace=owner.namespace,
                                   downloader_image=snapshot.downloader_image,
                                   token_secret=(token.name, token.key) if token else None)
        cache, requeue = chosen.view, chosen.requeue
        applies += [Apply(obj, force=False) for obj in chosen.apply]
        deletes += chosen.delete
        annotate += [chosen.record] if chosen.record else []
        expected_start_s = mc.expected_start_seconds(mc.weight_bytes(plan), cached=cache_ref.mode != "None")
    adapter_cache = None
    if snapshot.cache is not None and spec.adapters:
        token = spec.model.hfTokenSecretRef
        adapter_cache = adaptercache.plan(
            adaptercache.sources(spec), snapshot.cache.ref, cache_ready=cache is not None and cache.ready,
            claim=snapshot.cache.claim, jobs=snapshot.cache.adapter_jobs,
            job_pods={k: list(v) for k, v in snapshot.cache.adapter_pods.items()}, namespace=owner.namespace,
            image=snapshot.downloader_image, token_secret=(token.name, token.key) if token else None,
            progress=snapshot.cache.adapter_progress)
        applies += [Apply(job, force=False) for job in adapter_cache.jobs]
        annotate += adapter_cache.records
    if cache is not None and cache.ready:
        wanted = children.render(owner, spec, plan, desired, runtime_image=snapshot.runtime_image,
                                 cache=cache_ref, expected_start_s=expected_start_s,
                                 engine_images=snapshot.engine_images)
        wanted += routing_status.installable(routing.render(owner, spec, plan), missing_routing)
        unseen = tuple(key_of(obj) for obj in wanted if key_of(obj) not in snapshot.children
                       and (obj["kind"] != leaderworkerset.KIND or snapshot.lws_installed))
        if unseen:
            return Decision(lookups=unseen)
        lives = [snapshot.children.get(key_of(obj)) for obj in wanted]
        conflicts = ownership.conflicts(owner, zip(wanted, lives))
        if conflicts:  # touch nothing, not even our own children: a workload without its Service serves no one
            failure = Failure("ChildConflict", "; ".join(conflicts))
            wanted = []
        held = _held_service(snapshot, spec, owner)
        for obj, live in zip(wanted, lives):
            key = key_of(obj)
            if key == held:
                continue
            role = _role_of(obj)
            if role is not None:  # its own layout and replicas decide the rollout's room
                obj = rollouts.prepare(snapshot.nodes, snapshot.gpu_pods, spec, _role_plan(spec, plan, role), obj,
                                       live, _role_replicas(spec, role), namespace=owner.namespace, name=owner.name)
            elif obj["kind"] in WORKLOAD_KINDS:  # the rollout strategy goes on with the template
                obj = rendered_workload = rollouts.prepare(snapshot.nodes, snapshot.gpu_pods, spec, plan, obj, live,
                                                           desired, namespace=owner.namespace, name=owner.name)
            if obj["kind"] == leaderworkerset.KIND and not snapshot.lws_installed:
                lws_missing = True
                continue
            if live is not None and live["metadata"].get("deletionTimestamp"):
                # Being deleted (by the garbage collector, the namespace controller or a person):
                # applying would fight the deletion. Its deletion event brings us back to re-create it.
                continue
            if (live is None or not contains(live, obj)) and key not in refused.keys:
                applies.append(Apply(obj, force=live is not None))
                live = as_applied(live, obj)
            if role is not None:
                roles[role] = live
            elif obj["kind"] in WORKLOAD_KINDS:
                workload = live
            elif obj["kind"] in (routing.POOL_KIND, routing.ROUTE_KIND):
                routed[obj["kind"]] = live
    disaggregated = disaggregation.enabled(spec)
    if cache is not None and not cache.ready:
        # A new revision's weights are on their way: the running workload stays as it was (and
        # its counts stay on the status) until they are verified.
        if disaggregated:
            roles = {role: snapshot.owned_workloads.get(("apps/v1", "Deployment", disaggregation.role_name(owner.name, role)))
                     for role in disaggregation.ROLES}
        else:
            workload = next((w for w in snapshot.owned_workloads.values() if w is not None), None)
    elif disaggregated and roles and all(
            live is not None and progress.workload_ready(live, _role_replicas(spec, role),
                                                         _role_pods(snapshot.pods, role))
            for role, live in roles.items()):
        deletes += _replaced_workloads(snapshot, owner, {key_of(live) for live in roles.values() if live})
    elif workload is not None and progress.workload_ready(workload, desired):
        deletes += _replaced_workloads(snapshot, owner, {key_of(workload)})

    pods = snapshot.pods if workload is not None or any(roles.values()) else []
    role_views = tuple(progress.Role(
        role, roles.get(role), _role_pods(pods, role), _role_replicas(spec, role),
        int(_role_plan(spec, plan, role).get("tensorParallel") or 1),
        int(_role_plan(spec, plan, role).get("gpusPerReplica") or 1))
        for role in disaggregation.ROLES) if disaggregated and plan.get("feasible") else None
    rollout = None
    if workload is not None and rendered_workload is not None:
        rollout = rollouts.observe(snapshot.nodes, snapshot.gpu_pods, spec, plan, rendered_workload, workload, pods,
                                   desired, namespace=owner.namespace, name=owner.name)
    update = progress.build_status(spec, plan, workload, pods, stored, owner=owner, generation=generation, now=now,
                                   apply_failure=failure, rollout=rollout, roles=role_views)
    if lws_missing:
        update = missing_api.lws_not_installed_status(update, stored, generation=generation, now=now)
    update = _with_routing(update, snapshot, spec, owner, routed, missing_routing, generation=generation, now=now)
    update = _with_adapters(update, spec, pods, adapter_cache.where if adapter_cache else {},
                            adapters.name_conflicts(infd, snapshot.neighbours), generation=generation, now=now)
    deletes += routing_status.unwanted(spec, owner, snapshot.owned_routing)
    if cache is not None:
        update["modelCache"] = cachestate.status_fields(cache_ref, cache, expected_start_s=expected_start_s)
        update = cachestate.with_cache_condition(update, cache, generation=generation, now=now)
        if not cache.ready:
            update = cachestate.gated_status(update, stored, cache, generation=generation, now=now)
    update = _with_cold_start(update, stored, meta.get("annotations") or {}, now)
    decided = _with_status(stored, update)
    return dataclasses.replace(decided, apply=tuple(applies), delete=tuple(deletes), annotate=tuple(annotate),
                               failure=failure, requeue=requeue)


def _with_routing(update: dict[str, Any], snapshot: Snapshot, spec: api.InferenceDeploymentSpec,
                  owner: children.Owner, routed: Mapping[str, dict[str, Any] | None], missing: tuple[str, ...], *,
                  generation: int | None, now: str) -> dict[str, Any]:
    """`Routed`, from the routing children as they will be after the writes: those applied or
    kept by this pass, else as the snapshot saw them (weights downloading, a conflict)."""
    pool_key, route_key, _ = routing_keys(owner.name)

    def seen(kind: str, key: ChildKey) -> dict[str, Any] | None:
        if kind in routed:
            return routed[kind]
        found = snapshot.children.get(key)
        return found if found is not None else snapshot.owned_routing.get(key)

    condition = routing_status.routed_condition(
        spec, owner, missing=missing, pool=seen(routing.POOL_KIND, pool_key),
        route=seen(routing.ROUTE_KIND, route_key) if routing.route_enabled(spec) else None)
    return routing_status.with_routed(update, condition, generation=generation, now=now)


def _with_adapters(update: dict[str, Any], spec: api.InferenceDeploymentSpec, pods: list[dict[str, Any]],
                   where: Mapping[str, adaptercache.Where], conflicts: Mapping[str, str], *,
                   generation: int | None, now: str) -> dict[str, Any]:
    """status.adapters and AdaptersReady from what each ready replica's engine serves (the pod
    annotations the adapter loop writes) and where each adapter's files are; both absent when the
    spec has no adapters."""
    names = [a.name for a in spec.adapters]
    kept = [c for c in update.get("conditions") or [] if c.get("type") != adapters.CONDITION]
    if not names:
        # None, not absent: the status patch only removes what the update names.
        return {**update, "adapters": None, "conditions": kept}
    serving = [p for p in pods if p["metadata"]["name"] in live_status.scrape_targets(pods)]
    entries = adapters.with_cache_state(adapters.adapter_status(names, serving), where)
    entries = [{**e, "reason": adapters.NAME_CONFLICT, "message": conflicts[e["name"]]} if e["name"] in conflicts
               else e for e in entries]
    merged = conditions.merge(update.get("conditions") or [], [adapters.condition(entries)],
                              generation=generation, now=now)
    return {**update, "adapters": entries, "conditions": merged}


def _with_status(stored: dict[str, Any], update: dict[str, Any]) -> Decision:
    """The status patch against what is stored, and the events its transitions deserve."""
    patch = merge_patch(stored, update)
    if not patch:
        return Decision(status=update)
    events = transitions(stored, update) + cachestate.cache_events(stored, update)
    return Decision(status=update, status_patch=patch, events=tuple(events))


def _with_cold_start(update: dict[str, Any], stored: dict[str, Any], annotations: Mapping[str, Any],
                     now: str) -> dict[str, Any]:
    """`status.autoscaling.lastColdStart`: from the request the gateway held for a deployment with no
    ready replica (its wake annotation) to the first ready replica, recorded once per wake-up."""
    wake = annotations.get(WAKE_ANNOTATION)
    scaling = stored.get("autoscaling") or {}
    if not wake or (scaling.get("lastColdStart") or {}).get("requestedAt") == wake:
        return update
    if int(update.get("readyReplicas") or 0) < 1:
        return update
    try:
        seconds = (_instant(now) - _instant(str(wake))).total_seconds()
    except ValueError:  # not a time: nothing to measure from
        return update
    cold = {"requestedAt": wake, "readyAt": now, "seconds": round(max(0.0, seconds), 1)}
    return {**update, "autoscaling": {**scaling, "lastColdStart": cold}}


def _instant(text: str) -> datetime.datetime:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))


def _plan(snapshot: Snapshot, spec: api.InferenceDeploymentSpec) -> dict[str, Any]:
    infd = snapshot.infd
    current = (infd.get("status") or {}).get("plan")
    fingerprint = planning.planning_fingerprint(spec)
    token = planning.replan_token(infd["metadata"])
    if not planning.needs_new_plan(current, fingerprint, token, snapshot.nodes):
        return dict(current or {})
    meta = infd["metadata"]
    others = planning.pods_of_others(snapshot.gpu_pods, meta["namespace"], meta["name"])
    raw = dict(infd.get("spec") or {})
    if spec.adapters:  # with the ranks the downloads found (adaptercache.with_known_ranks)
        raw["adapters"] = [{**a, "rank": adapter.rank} if adapter.rank is not None else a
                           for a, adapter in zip(raw.get("adapters") or [], spec.adapters)]
    return planning.make_plan(raw, snapshot.nodes, others, dict(snapshot.prices or {}),
                              fingerprint=fingerprint, token=token, learned=dict(snapshot.learned or {}),
                              architecture=snapshot.architecture, architecture_failure=snapshot.architecture_failure)


def as_applied(live: dict[str, Any] | None, obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API server will answer the apply: our fields over the live ones, and a
    new generation when the spec changed (its controller has not observed it yet)."""
    if live is None:
        return {**copy.deepcopy(obj), "metadata": {**obj["metadata"], "generation": 1}, "status": {}}
    merged = _overlay(live, obj)
    if not contains(live.get("spec"), obj.get("spec") or {}):
        merged["metadata"]["generation"] = int(live["metadata"].get("generation") or 0) + 1
    return merged


def _overlay(base: Any, top: Any) -> Any:
    if isinstance(base, dict) and isinstance(top, dict):
        return {**{k: copy.deepcopy(v) for k, v in base.items() if k not in top},
                **{k: _overlay(base.get(k), v) for k, v in top.items()}}
    return copy.deepcopy(top)


def _replaced_workloads(snapshot: Snapshot, owner: children.Owner, serving: set[ChildKey]) -> list[dict[str, Any]]:
    """After a re-plan moved the replicas between a Deployment and a LeaderWorkerSet, or into or out
    of disaggregation, the old workloads go, but only once the new ones serve, and only if this
    resource controls them."""
    return [old for key, old in snapshot.owned_workloads.items()
            if key not in serving and old is not None and ownership.is_controlled_by(old, owner)
            and not old["metadata"].get("deletionTimestamp")]


def _held_service(snapshot: Snapshot, spec: api.InferenceDeploymentSpec, owner: children.Owner) -> ChildKey | None:
    """The model's Service while a running single pool is being replaced by a pair: it keeps
    selecting the old pods until both roles serve (then the same pass re-points it and deletes
    the old workload), so clients never see a Service with no ready endpoint."""
    if not disaggregation.enabled(spec):
        return None
    old = [w for key, w in snapshot.owned_workloads.items() if w is not None and _role_of(w) is None
           and key not in role_keys(owner.name) and ownership.is_controlled_by(w, owner)]
    if not old:
        return None
    serving = all((w := snapshot.children.get(("apps/v1", "Deployment", disaggregation.role_name(owner.name, role))))
                  is not None and progress.workload_ready(w, _role_replicas(spec, role),
                                                          _role_pods(snapshot.pods, role))
                  for role in disaggregation.ROLES)
    return None if serving else ("v1", "Service", names.service_name(owner.name))


def _role_of(obj: Mapping[str, Any]) -> str | None:
    """The role of a disaggregated deployment's workload; None for anything else."""
    if obj.get("kind") not in WORKLOAD_KINDS:
        return None
    return ((obj.get("metadata") or {}).get("labels") or {}).get(disaggregation.ROLE_LABEL) \
        or (((obj.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}).get(
            disaggregation.ROLE_LABEL)


def _role_spec(spec: api.InferenceDeploymentSpec, role: str) -> Any:
    assert spec.disaggregation is not None
    return spec.disaggregation.prefill if role == disaggregation.PREFILL else spec.disaggregation.decode


def _role_replicas(spec: api.InferenceDeploymentSpec, role: str) -> int:
    return int(_role_spec(spec, role).replicas)


def _role_plan(spec: api.InferenceDeploymentSpec, plan: dict[str, Any], role: str) -> dict[str, Any]:
    return disaggregation.role_plan(plan, _role_spec(spec, role).tensor)


def _role_pods(pods: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(disaggregation.ROLE_LABEL) == role]
