"""The autoscaler's memory where a new leader can read it: the ConfigMap `shardwise-autoscaling`.

One key per deployment (`<namespace>.<name>`) holds `autoscale.memory.to_dict` of its History:
decision runs, the learned safe load per replica, start time, throughput, forecast and idle time.
Read once per deployment when the operator (or a new leader) first evaluates it; written only
when `memory.material_change` says so (a new run of decisions, a learned figure moved by 10 %,
or the stored confirmation is `memory.HEARTBEAT_S` old), all changed keys in one apply. A steady
fleet writes it once per heartbeat; the InferenceDeployments themselves are never written for it.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from shardwise.autoscale import History, memory
from shardwise.controller.cluster import Cluster
from shardwise.kube.client import ApiException

log = logging.getLogger(__name__)

CONFIGMAP = "shardwise-autoscaling"


def data_key(namespace: str, name: str) -> str:
    return f"{namespace}.{name}"


class HistoryStore:
    """Loads and saves autoscaling histories; used from the autoscaler's thread only."""

    def __init__(self, kube: Cluster, namespace: str) -> None:
        self._kube = kube
        self._namespace = namespace
        self._stored: dict[str, dict[str, Any]] | None = None
        self._pending: dict[str, dict[str, Any]] = {}
        self._last_error = ""

    def _read(self) -> dict[str, dict[str, Any]]:
        if self._stored is None:
            try:
                cm = self._kube.get("v1", "ConfigMap", self._namespace, CONFIGMAP)
            except ApiException as exc:
                log.warning("cannot read ConfigMap %s/%s: %s", self._namespace, CONFIGMAP, exc.reason)
                return {}
            stored: dict[str, dict[str, Any]] = {}
            for key, text in ((cm or {}).get("data") or {}).items():
                try:
                    value = json.loads(text)
                except ValueError:
                    continue
                if isinstance(value, dict):
                    stored[key] = value
            self._stored = stored
        return self._stored

    def load(self, namespace: str, name: str, now: float) -> History:
        """The stored History as of `now`; empty when none is stored."""
        return memory.from_dict(self._read().get(data_key(namespace, name)), now)

    def save(self, namespace: str, name: str, history: History, period_s: float, now: float) -> None:
        """Remember `history`; written by `flush` when it changed materially."""
        key = data_key(namespace, name)
        current = memory.to_dict(history, period_s)
        if memory.material_change(self._read().get(key), current, now):
            self._pending[key] = current

    def forget(self, namespace: str, name: str) -> None:
        """The deployment is gone (or no longer autoscaled): drop its key at the next flush."""
        key = data_key(namespace, name)
        if key in self._read():
            self._pending[key] = {}

    def flush(self) -> None:
        """Write every pending change in one apply; on failure keep them for the next tick."""
        if not self._pending:
            return
        stored = dict(self._read())
        for key, value in self._pending.items():
            if value:
                stored[key] = value
            else:
                stored.pop(key, None)
        body = {
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CONFIGMAP, "namespace": self._namespace,
                         "labels": {"app.kubernetes.io/managed-by": "shardwise"}},
            "data": {k: json.dumps(v, sort_keys=True, separators=(",", ":")) for k, v in sorted(stored.items())},
        }
        try:
            self._kube.apply(body)
        except ApiException as exc:
            message = f"{exc.status} {exc.reason}"
            if message != self._last_error:
                log.warning("cannot write ConfigMap %s/%s (%s); autoscaling history stays in memory until "
                            "it can be written", self._namespace, CONFIGMAP, message)
            self._last_error = message
            return
        self._last_error = ""
        self._stored = stored
        self._pending = {}
