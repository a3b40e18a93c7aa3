"""The autoscaler's shell: gather an Observation, call `autoscale.decide`, record and apply it.

Every `autoscaling.evaluationPeriodSeconds` per deployment with `spec.autoscaling`: the freshest
metrics summary (from the observer, in memory), the replica counts reconcile wrote, and how many
replicas the GPUs that exist can hold go into `decide`; a decision that changes something lands in
`status.desiredReplicas` and `status.autoscaling`, one Event says why, and reconcile is triggered
to carry the count to the workload. The spec is never written: GitOps tools see no drift.

The History that stabilization windows read stays in memory: written to the status it would
change every period, and a steady object must not churn. After an operator restart the history is
empty, which `decide` treats conservatively (no scale-down until a whole window has been seen).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pydantic

from shardwise import autoscale, conditions, planner
from shardwise.api import v1alpha1 as api
from shardwise.autoscale import Decision, History, Observation
from shardwise.conditions import Condition
from shardwise.controller import events, progress
from shardwise.controller.compare import merge_patch
from shardwise.controller.kube import ApiException, Kube
from shardwise.controller.quietlog import QuietLog
from shardwise.controller.reconcile import now_rfc3339
from shardwise.controller.settings import Settings
from shardwise.observe.aggregate import Summary
from shardwise.planner import corrections, inventory, placement
from shardwise.render.labels import INSTANCE_LABEL
from shardwise.rollout import progress as rollout_progress
from shardwise.rollout import room

log = logging.getLogger(__name__)

CONFLICT = "AutoscalingConflict"
# Stabilization only reads the last window of records; this bounds the memory even when a window
# is long and the period short.
MAX_HISTORY = 64


# -- pure ------------------------------------------------------------------------------------

def capacity_replicas(plan: Mapping[str, Any], inv: inventory.Inventory,
                      node_selector: Mapping[str, str],
                      tolerations: Sequence[placement.Toleration] = ()) -> int | None:
    """Replicas the planned GPU product can hold: free GPUs on usable nodes, in whole pods.

    `inv` must be built without this deployment's own pods, so the GPUs its running replicas hold
    count as free: the answer includes them. Nodes with taints the pods do not tolerate hold
    none. The same accounting decides a rollout's strategy (rollout.room). None without a
    usable plan (nothing to bound by).
    """
    return room.replicas_that_fit(plan, inv, node_selector=node_selector, tolerations=tolerations)


def hpa_conflicts(hpas: list[dict[str, Any]], name: str) -> list[str]:
    """Names of HorizontalPodAutoscalers whose scaleTargetRef is this InferenceDeployment."""
    found = []
    for hpa in hpas:
        ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind") == api.KIND and ref.get("name") == name \
                and str(ref.get("apiVersion", api.GROUP)).split("/")[0] == api.GROUP:
            found.append(hpa["metadata"]["name"])
    return sorted(found)


def itl_floor_ms(predicted: Mapping[str, Any] | None, compared: Mapping[str, Any] | None) -> float | None:
    """An idle replica's inter-token latency: the floor that adding replicas cannot lower.

    The plan predicts it (`idleItlMs`); where the status already holds observed versus predicted
    ITL for this deployment (`status.prediction`), the observed ratio replaces whatever correction
    the plan was made with, so the floor follows what the engines really do.
    """
    figures = predicted or {}
    idle = figures.get("idleItlMs", figures.get("itlMs"))
    if idle is None:
        return None
    ratio = ((compared or {}).get("itlMs") or {}).get("ratio")
    if ratio:
        planned = (figures.get("correction") or {}).get("itlFactor") or 1.0
        return float(idle) / float(planned) * corrections.clamp(float(ratio))
    return float(idle)


def observation(summary: Summary | None, *, current: int, ready: int,
                capacity: int | None, predicted: Mapping[str, Any] | None = None,
                compared: Mapping[str, Any] | None = None,
                expected_startup_s: float | None = None,
                rollout: Mapping[str, Any] | None = None) -> Observation:
    """What `decide` sees; no summary (no scrape yet) means no latency and no load known.

    Scale-down projections count only the inter-token latency above an idle replica's
    (`itl_floor_ms`: observed where the status has it, else the plan's prediction).
    """
    s = summary
    return Observation(
        itl_floor_ms=itl_floor_ms(predicted, compared),
        expected_startup_s=expected_startup_s,
        current_replicas=current,
        replicas_ready=min(ready, current),
        replicas_starting=max(0, current - ready),
        ttft_p95_ms=s.ttft_p95_ms if s else None,
        itl_p95_ms=s.itl_p95_ms if s else None,
        e2e_p95_ms=s.e2e_p95_ms if s else None,
        waiting=(s.waiting or 0.0) if s else 0.0,
        running=(s.running or 0.0) if s else 0.0,
        kv_cache_usage=s.kv_cache_usage if s else None,
        requests_per_second=(s.requests_per_second or 0.0) if s else 0.0,
        capacity_replicas=capacity,
        rollout_in_progress=bool(rollout) and (rollout or {}).get("state") != rollout_progress.COMPLETE,
    )


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What one evaluation writes and announces."""

    update: dict[str, Any]
    events: tuple[tuple[str, str, str], ...]  # (type, reason, message)
    changed: bool


def apply_decision(status: Mapping[str, Any], decision: Decision, *, capacity: int | None,
                   stamp: str) -> Outcome:
    """The status update and events for a decision; no update when nothing material changed.

    Holds repeat every period with fresh numbers in their reason; writing each would make the
    object churn, so the status moves only when the replica count or the capacity bound does.
    """
    previous = status.get("autoscaling") or {}
    changed = decision.direction is not autoscale.Direction.HOLD
    found: list[tuple[str, str, str]] = []
    if changed:
        reason = "ScaledUp" if decision.direction is autoscale.Direction.UP else "ScaledDown"
        found.append(("Normal", reason, decision.event_message()))
    if decision.capacity_limited and not previous.get("capacityLimited"):
        found.append(("Warning", "InsufficientGPUCapacity",
                      f"{decision.event_message()}: only {capacity} replicas fit on the GPUs that exist"))
    material = {"desiredReplicas": decision.desired_replicas, "capacityLimited": decision.capacity_limited,
                "capacityReplicas": capacity}
    if previous and status.get("desiredReplicas") == decision.desired_replicas and all(
            previous.get(k) == v for k, v in material.items() if v is not None):
        return Outcome({}, tuple(found), changed)
    summary: dict[str, Any] = {
        **material,
        "reason": decision.reason,
        "lastScaleTime": stamp if changed else previous.get("lastScaleTime"),
    }
    update = {"desiredReplicas": decision.desired_replicas,
              "autoscaling": {k: v for k, v in summary.items() if v is not None}}
    return Outcome(update, tuple(found), changed)


def conflict_condition(names: list[str]) -> Condition:
    if names:
        return Condition(CONFLICT, True, "HorizontalPodAutoscaler",
                         f"HorizontalPodAutoscaler {', '.join(names)} targets this InferenceDeployment while "
                         "spec.autoscaling is set; shardwise makes no scaling decision until one is removed")
    return Condition(CONFLICT, False, "NoConflict", "no HorizontalPodAutoscaler targets this resource")


# -- shell -----------------------------------------------------------------------------------

class Autoscaler:
    """Evaluates each autoscaled deployment on its own period; reconcile applies the result.

    The deployments come from the informer cache and the due times from a dict, so a tick makes
    no API request unless an evaluation is due. Only the leader evaluates; status writes carry
    the resourceVersion they were computed from (a 409 retries the evaluation a second later).
    """

    def __init__(self, kube: Kube, settings: Settings, latest: Callable[[str, str], Summary | None],
                 reconcile: Callable[[str, str], None], *, acting: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.time) -> None:
        self.kube = kube
        self.settings = settings
        self._latest = latest
        self._reconcile = reconcile  # asks for a reconcile (enqueues the key)
        self._acting = acting
        self._clock = clock
        self._due: dict[tuple[str, str], float] = {}
        self._history: dict[tuple[str, str], History] = {}
        self._quiet = QuietLog(log, "autoscaling")

    async def run_forever(self) -> None:
        while True:
            try:
                if self._acting():
                    await asyncio.to_thread(self.tick)
                self._quiet.success()
            except Exception as exc:  # noqa: BLE001 - logged boundedly; the next tick retries
                self._quiet.failure(exc)
            await asyncio.sleep(self.settings.autoscale_tick_seconds)

    def tick(self) -> None:
        """Evaluate every autoscaled deployment whose period has come round."""
        now = self._clock()
        seen = set()
        failed: list[str] = []
        for item in self.kube.list_inference_deployments():
            autoscaling = (item.get("spec") or {}).get("autoscaling")
            if not autoscaling:
                continue
            key = (item["metadata"]["namespace"], item["metadata"]["name"])
            seen.add(key)
            period = float(autoscaling.get("evaluationPeriodSeconds") or 30)
            # The first evaluation waits one period: the metrics window needs something in it.
            due = self._due.setdefault(key, now + period)
            if now < due:
                continue
            self._due[key] = now + period
            try:
                if self.evaluate(*key):
                    self._reconcile(*key)
            except ApiException as exc:
                if exc.status == 409:  # written meanwhile: evaluate again from the fresh object
                    self._due[key] = now + 1.0
                    continue
                failed.append(f"{key[0]}/{key[1]}: {exc.status} {exc.reason}")
            except Exception as exc:  # one broken object must not starve the others
                log.debug("autoscaling %s/%s failed", *key, exc_info=exc)
                failed.append(f"{key[0]}/{key[1]}: {type(exc).__name__}: {exc}")
        for key in [k for k in self._due if k not in seen]:
            del self._due[key]
            self._history.pop(key, None)
        if failed:
            raise RuntimeError(f"{len(failed)} deployments failed, first {failed[0]}")

    def evaluate(self, namespace: str, name: str) -> bool:
        """One decision for one deployment; True when desired replicas changed."""
        infd = self.kube.get(f"{api.GROUP}/{api.VERSION}", api.KIND, namespace, name)
        if infd is None or infd["metadata"].get("deletionTimestamp"):
            return False
        try:
            spec = api.InferenceDeploymentSpec.model_validate(infd.get("spec") or {})
        except pydantic.ValidationError:
            return False  # reconcile reports it
        status = infd.get("status") or {}
        plan = status.get("plan") or {}
        if spec.autoscaling is None or not plan.get("feasible"):
            return False
        stamp = now_rfc3339()
        generation = infd["metadata"].get("generation")
        hpas = self.kube.list(f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers")
        conflicting = hpa_conflicts(hpas, name)
        merged = conditions.merge(status.get("conditions") or [], [conflict_condition(conflicting)],
                                  generation=generation, now=stamp)
        outcome = None
        update: dict[str, Any] = {"conditions": merged}
        if not conflicting:
            try:
                outcome = self._decide(namespace, name, spec, status, stamp)
                update.update(outcome.update)
            except autoscale.PolicyError as exc:  # the CRD's rules catch most; say the rest
                update["autoscaling"] = {**(status.get("autoscaling") or {}), "reason": f"invalid policy: {exc}"}
        patch = merge_patch(status, update)
        if patch:
            self.kube.patch_status(namespace, name, patch, resource_version=infd["metadata"].get("resourceVersion"))
        for type_, reason, message in outcome.events if outcome else ():
            events.emit(self.kube, infd, type_=type_, reason=reason, message=message, now=stamp)
        return bool(outcome and outcome.changed)

    def _decide(self, namespace: str, name: str, spec: api.InferenceDeploymentSpec,
                status: Mapping[str, Any], stamp: str) -> Outcome:
        assert spec.autoscaling is not None
        policy = autoscale.policy_from_spec(spec.autoscaling.model_dump(mode="json"))
        others = [p for p in self.kube.list_gpu_pods()
                  if not (p["metadata"].get("namespace") == namespace
                          and (p["metadata"].get("labels") or {}).get(INSTANCE_LABEL) == name)]
        inv = planner.inventory_from_nodes(self.kube.list_nodes(), others)
        capacity = capacity_replicas(status.get("plan") or {}, inv, spec.placement.nodeSelector,
                                     room.tolerations(spec.placement))
        obs = observation(self._latest(namespace, name), current=progress.desired_replicas(spec, dict(status)),
                          ready=int(status.get("readyReplicas") or 0), capacity=capacity,
                          predicted=(status.get("plan") or {}).get("predicted"),
                          expected_startup_s=(status.get("modelCache") or {}).get("expectedStartSeconds"),
                          compared=status.get("prediction"), rollout=status.get("rollout"))
        key = (namespace, name)
        now = self._clock()
        decision = autoscale.decide(policy, obs, self._history.get(key, History()), now)
        recorded = self._history.get(key, History()).record(decision, now)
        self._history[key] = History(recorded.records[-MAX_HISTORY:])
        if decision.direction is not autoscale.Direction.HOLD:
            log.info("%s/%s: %s", namespace, name, decision.event_message())
        else:
            log.debug("%s/%s: hold at %d: %s", namespace, name, decision.desired_replicas, decision.reason)
        return apply_decision(status, decision, capacity=capacity, stamp=stamp)

