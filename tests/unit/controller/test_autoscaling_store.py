"""The autoscaling history store against a fake API: read back by a new leader, no churn."""

from __future__ import annotations

from typing import Any

from shardwise.autoscale import History, Observation, decide, memory, policy_from_spec
from shardwise.controller import autoscaling_store

POLICY = policy_from_spec({"minReplicas": 1, "maxReplicas": 8, "slo": {"ttftP95": "500ms"}})


class FakeKube:
    def __init__(self) -> None:
        self.configmap: dict[str, Any] | None = None
        self.applied = 0

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.configmap

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.applied += 1
        self.configmap = obj
        return obj


def steady(history: History, start: float, periods: int, store: autoscaling_store.HistoryStore) -> History:
    quiet = Observation(current_replicas=3, replicas_ready=3, ttft_p95_ms=100.0, requests_per_second=5.0)
    for i in range(periods):
        now = start + 30.0 * i
        history = history.record(decide(POLICY, quiet, history, now), now)
        store.save("ns", "m", history, 30.0, now)
        store.flush()
    return history


def test_a_steady_deployment_writes_once_per_heartbeat_and_a_new_leader_reads_it_back() -> None:
    kube = FakeKube()
    store = autoscaling_store.HistoryStore(kube, "shardwise-system")  # type: ignore[arg-type]
    history = steady(History(), 0.0, 40, store)  # 20 minutes
    assert 1 <= kube.applied <= 2 + (40 * 30) // memory.HEARTBEAT_S, kube.applied
    # A new leader (a fresh store over the same ConfigMap) a few seconds after the last evaluation.
    restored = autoscaling_store.HistoryStore(kube, "shardwise-system").load("ns", "m", 40 * 30.0)  # type: ignore[arg-type]
    assert restored.records, "the window waited is remembered"
    assert restored.observed_since(40 * 30.0 - POLICY.scale_down_stabilization_s, 40 * 30.0, 75.0)
    assert [r.recommendation for r in restored.records][-5:] == [r.recommendation for r in history.records][-5:]
    assert restored.learned.forecast is not None


def test_a_store_older_than_the_heartbeat_keeps_what_was_learned_but_not_the_window() -> None:
    kube = FakeKube()
    store = autoscaling_store.HistoryStore(kube, "shardwise-system")  # type: ignore[arg-type]
    steady(History(), 0.0, 20, store)
    late = 20 * 30.0 + 2 * memory.HEARTBEAT_S
    restored = autoscaling_store.HistoryStore(kube, "shardwise-system").load("ns", "m", late)  # type: ignore[arg-type]
    assert restored.records == ()
    assert restored.learned.forecast is not None
