"""Predicted versus observed on every deployment, and the fleet's learned corrections (the shell).

Called from the observer loop once per deployment and window: it turns the window's summary into
plain figures, asks the planner what the running plan's layout should do at that observed load
(planner/replay.py), returns `status.prediction` (predicted, observed, ratio) and folds the ratios
into the correction for (model, GPU product, TP x PP) (planner/corrections.py, pure). The table is
kept in the ConfigMap `shardwise-corrections` in the operator's namespace: read once at start, so
a restart keeps what was learned, and written only when a factor moves materially. Planning
(reconcile.py, `shardwise plan --cluster`) reads the same table.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from shardwise.controller.cluster import Cluster
from shardwise.kube.client import ApiException
from shardwise.observe import aggregate
from shardwise.planner import corrections, plans, replay

log = logging.getLogger(__name__)

CONFIGMAP = "shardwise-corrections"
DATA_KEY = "corrections.json"


def read_table(kube: Cluster, namespace: str) -> dict[str, plans.Correction]:
    """The stored corrections; empty when the ConfigMap is missing or unreadable."""
    try:
        cm = kube.get("v1", "ConfigMap", namespace, CONFIGMAP)
    except ApiException as exc:
        log.warning("cannot read ConfigMap %s/%s: %s", namespace, CONFIGMAP, exc.reason)
        return {}
    text = ((cm or {}).get("data") or {}).get(DATA_KEY)
    if not text:
        return {}
    try:
        return corrections.from_table(json.loads(text))
    except ValueError:
        log.warning("ConfigMap %s/%s: %s is not JSON; starting afresh", namespace, CONFIGMAP, DATA_KEY)
        return {}


def observed_figures(summary: aggregate.Summary) -> dict[str, float | None]:
    return {
        "pods": float(summary.pods),
        "requests": summary.requests,
        "promptTokens": summary.prompt_tokens,
        "outputTokens": summary.output_tokens,
        "running": summary.running,
        "waiting": summary.waiting,
        "requestsPerSecond": summary.requests_per_second,
        "e2eMeanMs": summary.e2e_mean_ms,
        "ttftMeanMs": summary.ttft_mean_ms,
        "itlMeanMs": summary.itl_mean_ms,
        "outputTokensPerSecond": summary.output_tokens_per_second,
    }


class Calibrator:
    """Holds the correction table in memory; thread-safe (observer and reconcile threads)."""

    def __init__(self, kube: Cluster, namespace: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._lock = threading.Lock()
        self._table: dict[str, plans.Correction] | None = None
        self._stored: dict[str, plans.Correction] = {}
        self._last_error = ""

    def table(self) -> dict[str, plans.Correction]:
        with self._lock:
            if self._table is None:
                self._table = read_table(self._kube, self._namespace)
                self._stored = dict(self._table)
            return dict(self._table)

    def observe(self, spec: Mapping[str, Any], plan: Mapping[str, Any],
                summary: aggregate.Summary) -> dict[str, Any] | None:
        """`status.prediction` for one deployment's window, learning from it when it counts."""
        compared = replay.compare(spec, plan, observed_figures(summary))
        if compared is None:
            return None
        status, ratios = compared
        model = str((spec.get("model") or {}).get("name") or "")
        key = corrections.key(model, str(plan.get("gpuProduct")), int(plan["tensorParallel"]),
                              int(plan["pipelineParallel"]), plan.get("layout"))
        self.table()
        with self._lock:
            assert self._table is not None
            current = self._table.get(key)
            if summary.requests >= corrections.MIN_REQUESTS:
                current = corrections.learn(current, ratios)
                if current is not None:
                    self._table[key] = current
        if current is not None:
            # Without the sample count: it grows every window and would force a write each time.
            learned = {k: v for k, v in current.to_dict().items() if k != "samples"}
            status["correction"] = {"key": key, **learned}
        return status

    def persist(self) -> None:
        """Write the table when an entry is new or moved materially since the last write."""
        with self._lock:
            if self._table is None:
                return
            changed = any(corrections.material_change(self._stored.get(k), v) for k, v in self._table.items())
            if not changed:
                return
            snapshot = dict(self._table)
        body = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": self._namespace,
                         "labels": {"app.kubernetes.io/managed-by": "shardwise"}},
            "data": {DATA_KEY: json.dumps(corrections.to_table(snapshot), sort_keys=True)},
        }
        try:
            self._kube.apply(body)
        except ApiException as exc:  # e.g. the namespace is gone: keep learning, retry next window
            message = f"{exc.status} {exc.reason}"
            if message != self._last_error:
                log.warning("cannot write ConfigMap %s/%s (%s); corrections stay in memory until it "
                            "can be written", self._namespace, CONFIGMAP, message)
            self._last_error = message
            return
        self._last_error = ""
        with self._lock:
            self._stored = snapshot
