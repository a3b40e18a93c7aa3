"""A disaggregated deployment's metrics per role: the window summarised over one role's pods only,
and the pods grouped by their role label."""

from __future__ import annotations

import pytest
from observe_builders import sample

from shardwise.controller.observing import role_pods
from shardwise.observe.aggregate import Window


def test_a_role_summary_counts_only_that_roles_engines() -> None:
    w = Window(window_seconds=300)
    for pod in ("p-prefill-0", "p-decode-0"):
        w.add(pod, sample(requests=0), t=0)
    w.add("p-prefill-0", sample({1.0: 10}, requests=10, running=1), t=30)  # slow first tokens
    w.add("p-decode-0", sample({0.02: 90}, requests=90, running=6), t=30)
    both = w.summary(now=30)
    decode = w.summary(now=30, pods={"p-decode-0"})
    prefill = w.summary(now=30, pods={"p-prefill-0"})
    assert both.requests == 100 and both.ttft_p95_ms == pytest.approx(875.0)
    assert decode.requests == 90 and decode.running == 6 and decode.ttft_p95_ms < 20.0
    assert prefill.requests == 10 and prefill.running == 1 and prefill.ttft_p95_ms > 750.0


def test_pods_are_grouped_by_their_role_label() -> None:
    def pod(name: str, role: str | None) -> dict:
        return {"metadata": {"name": name, "labels": {"shardwise.io/role": role} if role else {}}}
    grouped = role_pods([pod("a", "prefill"), pod("b", "decode"), pod("c", "decode"), pod("d", None)])
    assert grouped == {"prefill": {"a"}, "decode": {"b", "c"}}
    assert role_pods([]) == {"prefill": set(), "decode": set()}
