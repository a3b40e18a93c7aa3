"""Live latency and cost on the status: the shell around observe/ (scrape, window, write).

Every metrics interval the observer lists the InferenceDeployments, scrapes the ready serving pods
of each (the leader of a multi-node group: only it serves the API and exports vLLM's metrics)
concurrently, folds the samples into one sliding Window per deployment, and writes
`status.latency`, `status.cost` and the conditions SLOMet and MetricsAvailable.

Windows live in memory: a restart loses at most one window of history, which the next window
refills; nothing about them needs to survive. The InferenceDeployments and their pods come from
the informers' caches (no API read per cycle). Status writes carry the resourceVersion they were
computed from, because `conditions` is one list that reconcile and this loop both write: a write
from a stale copy gets HTTP 409 and is redone from the fresh object next cycle, instead of
undoing the other's update. Only the leader scrapes and writes. The keys reconcile owns are
never in our patch; `should_write` keeps watchers from seeing churn.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import aiohttp
import pydantic

from shardwise import conditions
from shardwise.api import v1alpha1 as api
from shardwise.controller import calibration, events, loops
from shardwise.kube.compare import merge_patch
from shardwise.controller.cluster import Cluster
from shardwise.kube.client import ApiException
from shardwise.decide.live_status import (Key, METRICS_AVAILABLE, Observed, scrape_targets, status_cost,
                                              status_update)
from shardwise.kube.quietlog import QuietLog
from shardwise.controller.reconcile import now_rfc3339
from shardwise.controller.settings import Settings
from shardwise.observe import aggregate, collector, operator_metrics, status
from shardwise.render import disaggregation, labels

log = logging.getLogger(__name__)


@dataclasses.dataclass
class _Tracked:
    window: aggregate.Window
    last_write: float = float("-inf")
    failing: frozenset[str] = frozenset()
    summary: aggregate.Summary | None = None
    # A disaggregated deployment's summaries per role (its own engines only): prefill's TTFT and
    # decode's ITL each answer for one role and would be diluted by the other's.
    roles: dict[str, aggregate.Summary] = dataclasses.field(default_factory=dict)


def role_pods(pods: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Pod names by disaggregated role (every role present, empty when it has no pod)."""
    found: dict[str, set[str]] = {role: set() for role in disaggregation.ROLES}
    for pod in pods:
        meta = pod.get("metadata") or {}
        role = (meta.get("labels") or {}).get(disaggregation.ROLE_LABEL)
        if role in found:
            found[role].add(meta["name"])
    return found


class Observer:
    """Scrapes, aggregates and writes; `latest` hands the autoscaler the freshest summary."""

    def __init__(self, kube: Cluster, settings: Settings, acting: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.settings = settings
        self._acting = acting  # only the leader scrapes and writes
        self._clock = clock
        self._tracked: dict[Key, _Tracked] = {}
        self._quiet = QuietLog(log, "metrics cycle")
        # A prediction that cannot be made is a planner bug: said (boundedly), never at the cost
        # of the observed figures it would have been compared with.
        self._prediction_failed = QuietLog(log, "predicting at the observed load")
        self.calibrator = calibration.Calibrator(kube, settings.namespace)

    def latest(self, namespace: str, name: str) -> aggregate.Summary | None:
        tracked = self._tracked.get((namespace, name))
        return tracked.summary if tracked is not None else None

    def latest_role(self, namespace: str, name: str, role: str) -> aggregate.Summary | None:
        tracked = self._tracked.get((namespace, name))
        return tracked.roles.get(role) if tracked is not None else None

    async def run_forever(self) -> None:
        timeout = aiohttp.ClientTimeout(total=self.settings.scrape_timeout_seconds)
        async with aiohttp.ClientSession(timeout=timeout) as session:
            await loops.every(self.settings.metrics_interval_seconds, lambda: self.cycle(session),
                              acting=self._acting, quiet=self._quiet, clock=self._clock)

    async def cycle(self, session: aiohttp.ClientSession) -> None:
        items = await asyncio.to_thread(self.kube.list_inference_deployments)
        seen = {(i["metadata"]["namespace"], i["metadata"]["name"]) for i in items}
        for key in [k for k in self._tracked if k not in seen]:
            del self._tracked[key]
            operator_metrics.forget(*key)
        prices: dict[str, float] | None = None
        if any(not ((i.get("spec") or {}).get("pricing") or {}).get("gpuHourUSD") for i in items):
            # The planner's price table, read the same way (reconcile.py owns it).
            prices = await asyncio.to_thread(self.kube.pricing_table, self.settings.namespace,
                                           self.settings.pricing_configmap)
        results = await asyncio.gather(*(self._observe(i, session, prices or {}) for i in items),
                                       return_exceptions=True)
        failed = []
        for item, result in zip(items, results, strict=True):
            if isinstance(result, Exception):  # one broken object must not starve the others
                meta = item["metadata"]
                failed.append(f"{meta['namespace']}/{meta['name']}")
                log.debug("observing %s failed", failed[-1], exc_info=result)
        await asyncio.to_thread(self.calibrator.persist)
        if failed:  # said once per outage by the caller's QuietLog, not once per object per cycle
            first = next(r for r in results if isinstance(r, Exception))
            raise RuntimeError(f"{len(failed)} of {len(items)} deployments ({', '.join(failed[:3])}"
                               f"{', ...' if len(failed) > 3 else ''}): {type(first).__name__}: {first}")

    async def _observe(self, item: dict[str, Any], session: aiohttp.ClientSession,
                       prices: Mapping[str, float]) -> None:
        meta = item["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        plan = (item.get("status") or {}).get("plan") or {}
        try:
            spec = api.InferenceDeploymentSpec.model_validate(item.get("spec") or {})
        except pydantic.ValidationError:
            return  # reconcile reports it
        if not plan.get("feasible"):
            return
        tracked = self._tracked.setdefault(key, _Tracked(aggregate.Window(
            self.settings.metrics_window_seconds, stale_after_s=3 * self.settings.metrics_interval_seconds)))
        pods = await asyncio.to_thread(self.kube.list_pods, key[0], labels.selector_string(key[1]))
        targets = scrape_targets(pods)
        result = await collector.scrape(targets, timeout_s=self.settings.scrape_timeout_seconds, session=session,
                                        path=collector.metrics_path(str(spec.engine.value)))
        now = self._clock()
        for pod, sample in result.samples.items():
            tracked.window.add(pod, sample, now)
        summary = tracked.window.summary(now)
        tracked.summary = summary
        tracked.roles = {role: tracked.window.summary(now, names) for role, names in role_pods(pods).items()} \
            if disaggregation.enabled(spec) else {}
        latency = {**status.status_latency(summary), "scrapeErrors": len(result.errors)}
        ready = int((item.get("status") or {}).get("readyReplicas") or 0)
        figures = {"latency": latency, "cost": status_cost(plan, ready, spec, prices, summary)}
        try:
            prediction = await asyncio.to_thread(self.calibrator.observe, item.get("spec") or {}, plan, summary)
        except Exception as exc:  # noqa: BLE001 - latency and cost still go on the status without it
            self._prediction_failed.failure(exc)
            prediction = None
        if prediction is not None:
            figures["prediction"] = prediction
        observed = Observed(figures, len(targets), result.errors)
        await asyncio.to_thread(self._write, key, spec, observed, tracked, now)

    def _write(self, key: Key, spec: api.InferenceDeploymentSpec, observed: Observed,
               tracked: _Tracked, now: float) -> None:
        infd = self.kube.get(f"{api.GROUP}/{api.VERSION}", api.KIND, *key)
        if infd is None or infd["metadata"].get("deletionTimestamp") or not self._acting():
            return
        current = infd.get("status") or {}
        previous = {k: current[k] for k in observed.figures if current.get(k) is not None} or None
        write_figures = status.should_write(
            previous, observed.figures, tracked.last_write, now,
            min_interval_s=0.9 * self.settings.metrics_interval_seconds,
            relative_threshold=self.settings.metrics_write_threshold,
            refresh_s=self.settings.metrics_window_seconds)
        stamp = now_rfc3339()
        update = status_update(infd, spec, observed, write_figures=write_figures, now=stamp)
        patch = merge_patch(current, update)
        if patch:
            try:
                self.kube.patch_status(*key, patch, resource_version=infd["metadata"].get("resourceVersion"))
            except ApiException as exc:
                if exc.status != 409:
                    raise
                log.debug("%s/%s changed while observing; written next cycle", *key)
                return
        if write_figures:
            tracked.last_write = now
        newly_failing = set(observed.errors) - tracked.failing
        tracked.failing = frozenset(observed.errors)
        # One Warning per transition into failing, judged from the status, not from this
        # process's memory: a restarted operator must not announce again what is already known.
        was = conditions.find(current.get("conditions"), METRICS_AVAILABLE) or {}
        if newly_failing and was.get("reason") != "ScrapeFailed":
            failed = "; ".join(observed.errors[p].message for p in sorted(newly_failing))
            events.emit(self.kube, infd, type_="Warning", reason="MetricsScrapeFailed",
                        message=f"{len(newly_failing)} serving pod(s) did not answer: {failed}", now=stamp)
        operator_metrics.publish_status(*key, {**current, **update})
