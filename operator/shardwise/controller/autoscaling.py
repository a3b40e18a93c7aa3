"""The autoscaler's shell: gather an Observation, call `autoscale.decide`, record and apply it.

Every `autoscaling.evaluationPeriodSeconds` per deployment with `spec.autoscaling`: the freshest
metrics summary (from the observer, in memory), the replica counts reconcile wrote, and how many
replicas the GPUs that exist can hold go into `decide`; a decision that changes something lands in
`status.desiredReplicas` and `status.autoscaling`, one Event says why, and reconcile is triggered
to carry the count to the workload. The spec is never written: GitOps tools see no drift.

The History that stabilization windows and the forecast read is kept in memory and in the
ConfigMap `shardwise-autoscaling` (controller/autoscaling_store.py), written only when it changes
materially: a restarted operator or a new leader reads it back, so it neither scales down early
nor waits a window already waited. It is not on the status: it changes every period, and a
steady object must not churn.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import pydantic

from shardwise import autoscale, conditions, planner
from shardwise.api import v1alpha1 as api
from shardwise.autoscale import History
from shardwise.controller import autoscaling_store, events
from shardwise.decide import progress, scaling_status
from shardwise.kube.compare import merge_patch
from shardwise.controller.cluster import Cluster
from shardwise.kube.client import ApiException
from shardwise.kube.quietlog import QuietLog
from shardwise.controller.reconcile import now_rfc3339
from shardwise.decide.scaling_status import (MAX_HISTORY, Outcome, apply_decision, capacity_replicas,
                                             conflict_condition, held_at_gateway, hpa_conflicts, observation)
from shardwise.controller.settings import Settings
from shardwise.observe.aggregate import Summary
from shardwise.render import disaggregation
from shardwise.render.labels import INSTANCE_LABEL
from shardwise.rollout import room

log = logging.getLogger(__name__)


class Autoscaler:
    """Evaluates each autoscaled deployment on its own period; reconcile applies the result.

    The deployments come from the informer cache and the due times from a dict, so a tick makes
    no API request unless an evaluation is due. Only the leader evaluates; status writes carry
    the resourceVersion they were computed from (a 409 retries the evaluation a second later).
    A decision goes into the History only once its status write succeeded: one that was never
    applied must not start a stabilization window.
    """

    def __init__(self, kube: Cluster, settings: Settings, latest: Callable[[str, str], Summary | None],
                 reconcile: Callable[[str, str], None], *, acting: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.time,
                 latest_role: Callable[[str, str, str], Summary | None] = lambda *_: None) -> None:
        self.kube = kube
        self.settings = settings
        self._latest = latest
        self._latest_role = latest_role  # a disaggregated role's engines only
        self._reconcile = reconcile  # asks for a reconcile (enqueues the key)
        self._acting = acting
        self._clock = clock
        self._due: dict[tuple[str, str], float] = {}
        self._history: dict[tuple[str, str], History] = {}
        # The resourceVersion each of our status writes was made over. While the cache still shows
        # it, the cache predates that write: deciding from it would decide the same change again
        # from the old status (compared for equality only: resourceVersions are opaque).
        self._written_over: dict[tuple[str, str], str] = {}
        self._store = autoscaling_store.HistoryStore(kube, settings.namespace)
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
            period = _period(item.get("spec") or {})
            if period is None:
                continue
            key = (item["metadata"]["namespace"], item["metadata"]["name"])
            seen.add(key)
            # The first evaluation waits one period: the metrics window needs something in it.
            due = self._due.setdefault(key, now + period)
            if now < due or self._cache_behind(key, item):  # behind: evaluated once it catches up
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
            for history_key in (key, *((key[0], _role_key(key[1], role)) for role in scaling_status.ROLE_SLO)):
                if history_key in self._history:
                    self._store.forget(*history_key)
                self._history.pop(history_key, None)
            self._written_over.pop(key, None)
            self._store.forget(*key)
        self._store.flush()
        if failed:
            raise RuntimeError(f"{len(failed)} deployments failed, first {failed[0]}")

    def _cache_behind(self, key: tuple[str, str], cached: Mapping[str, Any]) -> bool:
        written_over = self._written_over.get(key)
        if written_over is not None and cached["metadata"].get("resourceVersion") == written_over:
            return True
        self._written_over.pop(key, None)
        return False

    def wake(self, namespace: str, name: str) -> None:
        """Evaluate this deployment at the next tick: the gateway holds a request for it."""
        self._due[(namespace, name)] = self._clock()

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
        roles = scaling_status.scaled_roles(spec)
        if (spec.autoscaling is None and not roles) or not plan.get("feasible"):
            return False
        stamp = now_rfc3339()
        generation = infd["metadata"].get("generation")
        hpas = self.kube.list(f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers")
        conflicting = hpa_conflicts(hpas, name)
        merged = conditions.merge(status.get("conditions") or [], [conflict_condition(conflicting)],
                                  generation=generation, now=stamp)
        outcome = None
        remember: Callable[[], None] = lambda: None
        update: dict[str, Any] = {"conditions": merged}
        if not conflicting:
            held = held_at_gateway(infd["metadata"].get("annotations") or {}, status)
            try:
                decide = self._decide_roles if roles else self._decide
                outcome, remember = decide(namespace, name, spec, status, stamp, held=held)
                update.update(outcome.update)
            except autoscale.PolicyError as exc:  # the CRD's rules catch most; say the rest
                update["autoscaling"] = {**(status.get("autoscaling") or {}), "reason": f"invalid policy: {exc}"}
        patch = merge_patch(status, update)
        if patch:
            read = infd["metadata"].get("resourceVersion")
            self.kube.patch_status(namespace, name, patch, resource_version=read)  # a 409 raises: nothing remembered
            if read is not None:
                self._written_over[(namespace, name)] = read
        remember()
        for type_, reason, message in outcome.events if outcome else ():
            events.emit(self.kube, infd, type_=type_, reason=reason, message=message, now=stamp)
        return bool(outcome and outcome.changed)

    def _decide_roles(self, namespace: str, name: str, spec: api.InferenceDeploymentSpec,
                      status: Mapping[str, Any], stamp: str, *, held: float = 0.0
                      ) -> tuple[Outcome, Callable[[], None]]:
        """Each autoscaled role of a disaggregated deployment on its own SLO, with the same `decide`:
        its own engines' metrics, replicas, GPUs, History and forecast; then the pair rule."""
        now = self._clock()
        gpu_pods = self.kube.list_gpu_pods()
        nodes = self.kube.list_nodes()
        plan = status.get("plan") or {}
        role_views = status.get("roles") or {}
        decisions: dict[str, autoscale.Decision] = {}
        policies: dict[str, autoscale.Policy] = {}
        capacity: dict[str, int | None] = {}
        current: dict[str, int] = {}
        for role in scaling_status.scaled_roles(spec):
            policies[role] = scaling_status.role_policy(spec, role)
            # The other role's GPUs are taken: only this role's own pods count as room.
            others = [p for p in gpu_pods
                      if not (p["metadata"].get("namespace") == namespace
                              and (p["metadata"].get("labels") or {}).get(INSTANCE_LABEL) == name
                              and (p["metadata"].get("labels") or {}).get(disaggregation.ROLE_LABEL) == role)]
            planned = disaggregation.role_plan(plan, scaling_status.role_spec(spec, role).tensor)
            capacity[role] = capacity_replicas(planned, planner.inventory_from_nodes(nodes, others),
                                               spec.placement.nodeSelector, room.tolerations(spec.placement))
            current[role] = scaling_status.role_replicas(spec, status, role)
            obs = observation(self._latest_role(namespace, name, role), current=current[role],
                              ready=int((role_views.get(role) or {}).get("readyReplicas") or 0),
                              capacity=capacity[role], predicted=plan.get("predicted"),
                              expected_startup_s=(status.get("modelCache") or {}).get("expectedStartSeconds"),
                              held=held)
            key = (namespace, _role_key(name, role))
            if key not in self._history:
                self._history[key] = self._store.load(*key, now)
            decisions[role] = autoscale.decide(policies[role], obs, self._history[key], now)
        decisions = scaling_status.paired(decisions, current)

        def remember() -> None:
            for role, decision in decisions.items():
                key = (namespace, _role_key(name, role))
                recorded = self._history[key].record(decision, now)
                self._history[key] = History(recorded.records[-MAX_HISTORY:], recorded.learned)
                self._store.save(*key, self._history[key], policies[role].evaluation_period_s, now)
                if decision.direction is not autoscale.Direction.HOLD:
                    log.info("%s/%s %s: %s", namespace, name, role, decision.event_message())

        return scaling_status.apply_role_decisions(status, decisions, capacity=capacity, stamp=stamp), remember

    def _decide(self, namespace: str, name: str, spec: api.InferenceDeploymentSpec,
                status: Mapping[str, Any], stamp: str, *, held: float = 0.0) -> tuple[Outcome, Callable[[], None]]:
        """The decision's status update, and what records it: to be called once it is written."""
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
                          compared=status.get("prediction"), rollout=status.get("rollout"), held=held)
        key = (namespace, name)
        now = self._clock()
        if key not in self._history:  # first evaluation here: what the last leader remembered
            self._history[key] = self._store.load(namespace, name, now)
        decision = autoscale.decide(policy, obs, self._history[key], now)

        def remember() -> None:
            recorded = self._history[key].record(decision, now)
            self._history[key] = History(recorded.records[-MAX_HISTORY:], recorded.learned)
            self._store.save(namespace, name, self._history[key], policy.evaluation_period_s, now)
            if decision.direction is not autoscale.Direction.HOLD:
                log.info("%s/%s: %s", namespace, name, decision.event_message())
            else:
                log.debug("%s/%s: hold at %d: %s", namespace, name, decision.desired_replicas, decision.reason)

        return apply_decision(status, decision, capacity=capacity, stamp=stamp), remember


def _role_key(name: str, role: str) -> str:
    """A role's History key, `<name>.<role>`: each role learns its own capacity and forecast."""
    return f"{name}.{role}"


def _period(spec: Mapping[str, Any]) -> float | None:
    """How often this deployment is evaluated; None when nothing of it autoscales. A pair's roles
    are evaluated together, at the shorter of their periods."""
    autoscaling = spec.get("autoscaling")
    if autoscaling:
        return float(autoscaling.get("evaluationPeriodSeconds") or 30)
    d = spec.get("disaggregation") or {}
    if d.get("mode") != api.DisaggregationMode.Disaggregated.value:
        return None
    periods = [float((d.get(role) or {}).get("autoscaling", {}).get("evaluationPeriodSeconds") or 30)
               for role in scaling_status.ROLE_SLO if (d.get(role) or {}).get("autoscaling")]
    return min(periods) if periods else None
