"""Startup probes sized from the weights a replica loads, so a 405B is not killed while loading."""

from __future__ import annotations

import pytest
from render_builders import OWNER, plan, spec
from shardwise.render import children, probes


def _plan(weights_gib_per_gpu: float, gpus: int, nodes: int = 1) -> dict:
    p = plan(tp=min(gpus, 8), pp=max(gpus // 8, 1), per_node=gpus // nodes, nodes=nodes)
    return {**p, "gpusPerReplica": gpus, "memory": {"weightsGiBPerGPU": weights_gib_per_gpu}}


def _allowed_s(rendered: dict) -> int:
    pod = rendered["spec"]["template"]["spec"] if rendered["kind"] == "Deployment" else \
        rendered["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    startup = pod["containers"][0]["startupProbe"]
    return startup["periodSeconds"] * startup["failureThreshold"]


def test_405b_over_two_nodes_gets_more_than_the_old_thirty_minutes() -> None:
    # Llama 3.1 405B bf16: ~47 GiB per GPU on 16 GPUs, 756 GiB per replica; at 250 MiB/s the
    # transfer alone is 52 minutes.
    p = _plan(47.3, 16, nodes=2)
    budget = probes.startup_budget_s(p)
    assert budget > 52 * 60 > 30 * 60
    lws = children.render(OWNER, spec(), p, 1)[0]
    assert _allowed_s(lws) >= budget


def test_small_model_keeps_the_floor_and_a_faster_load_shortens_a_large_one() -> None:
    small = _plan(15.0, 1)
    assert probes.startup_budget_s(small) == probes.MIN_STARTUP_S
    big = _plan(47.3, 16, nodes=2)
    assert probes.startup_budget_s(big, load_mibps=4000) < probes.startup_budget_s(big)


def test_budget_grows_with_weights_and_shrinks_with_bandwidth() -> None:
    budgets = [probes.startup_budget_s(_plan(w, 8)) for w in (10, 40, 80)]
    assert budgets == sorted(budgets) and budgets[0] < budgets[-1]
    assert probes.startup_budget_s(_plan(80, 8), 100) > probes.startup_budget_s(_plan(80, 8), 1000)


@pytest.mark.parametrize("mibps", [None, 100, 2000])
def test_spec_override_reaches_the_rendered_probe(mibps: int | None) -> None:
    p = _plan(16.4, 8)
    s = spec(serving={"modelLoadMiBps": mibps} if mibps else {})
    rendered = children.render(OWNER, s, p, 1)[0]
    assert _allowed_s(rendered) >= probes.startup_budget_s(p, mibps)
    assert _allowed_s(rendered) < probes.startup_budget_s(p, mibps) + probes.PERIOD_S


def test_a_plan_without_memory_figures_still_gets_the_floor() -> None:
    assert probes.startup_budget_s({"gpusPerReplica": 8}) == probes.MIN_STARTUP_S
