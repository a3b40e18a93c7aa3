"""What the observer writes, decided from plain data: scrape targets, the SLOMet and
MetricsAvailable conditions, cost, and the status patch of one observed window.

Pure (no I/O); `observing` scrapes and writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from shardwise import conditions, pricing
from shardwise.api import v1alpha1 as api
from shardwise.conditions import Condition
from shardwise.observe import aggregate, cost, status

if TYPE_CHECKING:  # only its error type, in annotations: the scraping itself is the shell's
    from shardwise.observe import collector

SLO_MET = "SLOMet"
METRICS_AVAILABLE = "MetricsAvailable"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"

Key = tuple[str, str]


def scrape_targets(pods: list[dict[str, Any]]) -> dict[str, str]:
    """Pod name -> pod IP of the ready, non-terminating serving pods that lead their group."""
    targets = {}
    for pod in pods:
        meta, st = pod.get("metadata") or {}, pod.get("status") or {}
        if (meta.get("labels") or {}).get(WORKER_INDEX_LABEL, "0") != "0" or meta.get("deletionTimestamp"):
            continue
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or [])
        if ready and st.get("podIP"):
            targets[meta["name"]] = st["podIP"]
    return targets


def status_cost(plan: Mapping[str, Any], ready_replicas: int, spec: api.InferenceDeploymentSpec,
                prices: Mapping[str, float], summary: aggregate.Summary) -> dict[str, Any]:
    """`status.cost`: the GPUs of the ready replicas at the resolved price and observed throughput."""
    price, source = pricing.resolve_gpu_hour_price(str(plan.get("gpuProduct") or ""),
                                                   spec.pricing.gpuHourUSD, prices)
    gpus = int(plan.get("gpusPerReplica") or 0) * ready_replicas
    total = None
    if summary.output_tokens_per_second is not None:
        total = summary.output_tokens_per_second + (summary.prompt_tokens_per_second or 0.0)
    return status.status_cost(cost.cost(gpus, price, source, summary.output_tokens_per_second, total))


def slo_condition(slo: api.SLOSpec, latency: Mapping[str, Any]) -> Condition:
    """SLOMet from the written latency figures, naming every target and what was observed."""
    checks = [(label, latency.get(field), target) for label, field, target in (
        ("TTFT p95", "ttftP95Ms", slo.ttftP95), ("ITL p95", "itlP95Ms", slo.itlP95),
        ("E2E p95", "e2eP95Ms", slo.e2eP95)) if target is not None]
    measured = [(label, observed, target) for label, observed, target in checks if observed is not None]
    if not measured:
        return Condition(SLO_MET, None, "NoTraffic", f"no requests finished in the last {latency.get('window')}")
    parts, met = [], True
    for label, observed, target in measured:
        target_ms = _duration_ms(target)
        ok = observed <= target_ms
        met = met and ok
        parts.append(f"{label} {observed:g} ms {'<=' if ok else '>'} SLO {target_ms:g} ms")
    return Condition(SLO_MET, met, "WithinSLO" if met else "SLOBreached", "; ".join(parts))


def _duration_ms(text: str) -> float:
    for unit, factor in (("ms", 1.0), ("s", 1000.0), ("m", 60_000.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * factor
    raise ValueError(f"not a duration: {text!r}")  # the CRD pattern makes this unreachable


def metrics_condition(targets: int, errors: Mapping[str, collector.ScrapeError]) -> Condition:
    """MetricsAvailable: which pods did not answer (kinds only, so one flaky error does not churn)."""
    if errors:
        failed = ", ".join(f"{pod} ({errors[pod].kind})" for pod in sorted(errors))
        return Condition(METRICS_AVAILABLE, False, "ScrapeFailed",
                         f"{len(errors)} of {targets} serving pods did not answer /metrics: {failed}")
    if not targets:
        return Condition(METRICS_AVAILABLE, None, "NoReadyPods", "no ready serving pod to scrape")
    return Condition(METRICS_AVAILABLE, True, "Scraped", f"{targets} serving pods scraped")


@dataclasses.dataclass(frozen=True)
class Observed:
    """One cycle's figures for one deployment, before deciding whether to write them."""

    figures: dict[str, Any]  # {"latency": ..., "cost": ...}
    targets: int
    errors: Mapping[str, collector.ScrapeError]


def status_update(infd: Mapping[str, Any], spec: api.InferenceDeploymentSpec, observed: Observed, *,
                  write_figures: bool, now: str) -> dict[str, Any]:
    """The status keys this observer owns (figures only when `write_figures`), from a fresh object."""
    current = infd.get("status") or {}
    figures = observed.figures if write_figures else {k: current.get(k) for k in observed.figures}
    existing = current.get("conditions") or []
    updates = [metrics_condition(observed.targets, observed.errors)]
    slo = spec.autoscaling.slo if spec.autoscaling is not None else None
    if slo is None:  # SLOs removed from the spec: the condition about them goes too
        existing = [c for c in existing if c.get("type") != SLO_MET]
    else:
        updates.append(slo_condition(slo, figures.get("latency") or {}))
    update: dict[str, Any] = {"conditions": conditions.merge(
        existing, updates, generation=infd["metadata"].get("generation"), now=now)}
    if write_figures:
        update.update(observed.figures)
    return update
