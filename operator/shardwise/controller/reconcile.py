"""One level-triggered reconcile of an InferenceDeployment.

Steps (each a function below):
  1. read the spec; one the models reject is reported, and nothing else is touched;
  2. plan: keep the current plan unless planning inputs changed (see planning.py);
  3. render the children and apply only those whose live state lacks what we want, and only when
     every existing one is controlled by this resource (ownership.py); a refusal from the API
     server that retrying cannot fix (errors.py) goes on the status instead of raising;
  4. derive status from the plan and the live workload, and write it only when it changed.
Everything that decides is pure (planner, render, progress); this module only reads and writes.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

import pydantic

from shardwise.api import v1alpha1 as api
from shardwise.controller import (calibration, cachestate, errors, events, missing_api, modelcache, ownership,
                                 planning, progress, rollouts)
from shardwise.controller.compare import contains, merge_patch
from shardwise.controller.kube import ApiException, Kube
from shardwise.controller.settings import Settings
from shardwise.controller.workload_health import Failure
from shardwise.render import children, labels
from shardwise.render import modelcache as mc

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    applied: tuple[str, ...]
    status_written: bool
    failure: Failure | None = None  # a permanent failure, reported on the status (not worth a hot retry)


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def reconcile(kube: Kube, settings: Settings, namespace: str, name: str) -> Outcome:
    infd = kube.get(f"{api.GROUP}/{api.VERSION}", api.KIND, namespace, name)
    if infd is None or infd["metadata"].get("deletionTimestamp"):
        return Outcome((), False)
    meta, status = infd["metadata"], infd.get("status") or {}
    generation = meta.get("generation")
    now = now_rfc3339()

    try:
        spec = api.InferenceDeploymentSpec.model_validate(infd.get("spec") or {})
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        message = f"spec.{'.'.join(map(str, first['loc']))}: {first['msg']}"
        update = progress.invalid_spec_status(status, message, generation=generation, now=now)
        return Outcome((), _write_status(kube, infd, update))

    plan = _plan(kube, settings, infd, spec)
    owner = children.Owner(name=name, namespace=namespace, uid=meta["uid"])
    applied: list[str] = []
    workload = rendered_workload = None
    lws_missing = False
    cache: cachestate.CacheView | None = None
    failure: Failure | None = None
    if plan.get("feasible"):
        # No serving pod before its weights are complete and verified.
        cache_ref, cache = modelcache.ensure(kube, settings, namespace, spec, plan)
        expected_start_s = mc.expected_start_seconds(mc.weight_bytes(plan), cached=cache_ref.mode != "None")
    if plan.get("feasible") and cache is not None and cache.ready:
        replicas = progress.desired_replicas(spec, status)
        wanted = children.render(owner, spec, plan, replicas, runtime_image=settings.runtime_image,
                                 cache=cache_ref, expected_start_s=expected_start_s)
        lives = [kube.get(obj["apiVersion"], obj["kind"], namespace, obj["metadata"]["name"]) for obj in wanted]
        conflicts = ownership.conflicts(owner, zip(wanted, lives))
        if conflicts:  # touch nothing, not even our own children: a workload without its Service serves no one
            failure = Failure("ChildConflict", "; ".join(conflicts))
            wanted = []
        for obj, live in zip(wanted, lives):
            if obj["kind"] in rollouts.WORKLOAD_KINDS:  # the rollout strategy goes on with the template
                obj = rendered_workload = rollouts.prepare(kube, spec, plan, obj, live, replicas,
                                                           namespace=namespace, name=name)
            if live is not None and live["metadata"].get("deletionTimestamp"):
                # Being deleted (by the garbage collector, the namespace controller or a person):
                # applying would fight the deletion. Its deletion event brings us back to re-create it.
                continue
            if live is None or not contains(live, obj):
                try:
                    # Force only on objects we control (it takes back our own fields from other
                    # managers); a create is not forced, so a namesake made since the read conflicts.
                    live = kube.apply(obj, force=live is not None)
                except ApiException as exc:
                    if missing_api.is_missing_lws_api(exc, obj):
                        lws_missing = True
                        continue
                    typed = errors.classify(exc)
                    if not typed.permanent:
                        raise
                    failure = failure or Failure(typed.reason, f"{obj['kind']} {obj['metadata']['name']}: "
                                                               f"{typed.message}")
                    continue
                applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
            if obj["kind"] in ("Deployment", "LeaderWorkerSet"):
                workload = live
    if cache is not None and not cache.ready:
        # A new revision's weights are on their way: the running workload stays as it was (and
        # its counts stay on the status) until they are verified.
        workload = modelcache.existing_workload(kube, owner)
    elif workload is not None and progress.workload_ready(workload, progress.desired_replicas(spec, status)):
        applied += _remove_replaced_workload(kube, owner, workload)
    if applied:
        log.info("%s/%s: applied %s", namespace, name, ", ".join(applied))

    pods = kube.list_pods(namespace, labels.selector_string(name)) if workload is not None else []
    rollout = None
    if workload is not None and rendered_workload is not None:
        rollout = rollouts.observe(kube, spec, plan, rendered_workload, workload, pods,
                                   progress.desired_replicas(spec, status), namespace=namespace, name=name)
    update = progress.build_status(spec, plan, workload, pods, status, owner=owner, generation=generation, now=now,
                                   apply_failure=failure, rollout=rollout)
    if lws_missing:
        update = missing_api.lws_not_installed_status(update, status, generation=generation, now=now)
    if cache is not None:
        update["modelCache"] = cachestate.status_fields(cache_ref, cache, expected_start_s=expected_start_s)
        update = cachestate.with_cache_condition(update, cache, generation=generation, now=now)
        if not cache.ready:
            update = cachestate.gated_status(update, status, cache, generation=generation, now=now)
    written = _write_status(kube, infd, update)
    if written:
        events.announce_transitions(kube, infd, status, update, now)
        for type_, reason, message in cachestate.cache_events(status, update):
            events.emit(kube, infd, type_=type_, reason=reason, message=message, now=now)
    if failure is not None and written:
        log.warning("%s/%s: %s: %s", namespace, name, failure.reason, failure.message)
    return Outcome(tuple(applied), written, failure)


def _remove_replaced_workload(kube: Kube, owner: children.Owner, workload: dict[str, Any]) -> list[str]:
    """After a re-plan moved the replicas between a Deployment and a LeaderWorkerSet, delete the
    old workload, but only once the new one serves, and only if this resource owns it."""
    removed = []
    for api_version, kind, name in children.workload_candidates(owner.name):
        if kind == workload["kind"]:
            continue
        try:
            # Only an owned workload matters here, and that carries our label: the cache has it.
            old = kube.get_cached(api_version, kind, owner.namespace, name)
        except ApiException as exc:
            if exc.status == 404:  # the kind itself is not installed (no LeaderWorkerSet CRD)
                continue
            raise
        if old and ownership.is_controlled_by(old, owner):
            kube.delete_owned(old)
            removed.append(f"deleted {kind}/{name}")
    return removed


def _plan(kube: Kube, settings: Settings, infd: dict[str, Any], spec: api.InferenceDeploymentSpec) -> dict[str, Any]:
    current = (infd.get("status") or {}).get("plan")
    fingerprint = planning.planning_fingerprint(spec)
    token = planning.replan_token(infd["metadata"])
    nodes = kube.list_nodes()
    if not planning.needs_new_plan(current, fingerprint, token, nodes):
        return current
    prices = kube.pricing_table(settings.namespace, settings.pricing_configmap)
    others = planning.pods_of_others(kube.list_gpu_pods(), infd["metadata"]["namespace"], infd["metadata"]["name"])
    return planning.make_plan(infd.get("spec") or {}, nodes, others, prices, fingerprint=fingerprint, token=token,
                              learned=calibration.read_table(kube, settings.namespace))


def _write_status(kube: Kube, infd: dict[str, Any], update: dict[str, Any]) -> bool:
    """Merge-patch only the status keys whose value changed; nothing when none did.

    The patch is conditional on the resourceVersion it was computed from: if anyone wrote since,
    the API server answers 409 and the work queue reconciles again from the fresh object.
    """
    patch = merge_patch(infd.get("status") or {}, update)
    if not patch:
        return False
    meta = infd["metadata"]
    kube.patch_status(meta["namespace"], meta["name"], patch, resource_version=meta.get("resourceVersion"))
    return True
