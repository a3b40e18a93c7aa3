"""Learned corrections (pure) and predicted-versus-observed at the observed load."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from shardwise import planner
from shardwise.planner import corrections, plans, replay

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SPEC = yaml.safe_load((FIXTURES / "deployments" / "llama-3.1-70b.yaml").read_text())["spec"]
NODES = [d for d in yaml.safe_load_all((FIXTURES / "nodes" / "h100-nvswitch-2x8.yaml").read_text()) if d]


def _nodes() -> list[dict]:
    out = []
    for doc in NODES:
        out.extend(doc.get("items", [doc]))
    return out


def test_learning_converges_to_the_observed_ratio_and_stays_bounded() -> None:
    learned = None
    for _ in range(40):
        learned = corrections.learn(learned, {"ttft": 1.5, "itl": 1.5, "tokens_per_second": 1 / 1.5})
    assert learned is not None and learned.samples == 40
    assert learned.itl == pytest.approx(1.5, rel=1e-6) and learned.tokens_per_second == pytest.approx(1 / 1.5)
    wild = corrections.learn(None, {"ttft": 1e6, "itl": 0.0, "tokens_per_second": float("nan")})
    assert wild is not None
    assert wild.ttft == corrections.BOUND and wild.itl == 1.0 and wild.tokens_per_second == 1.0


def test_one_odd_window_moves_an_established_correction_little() -> None:
    learned = None
    for _ in range(20):
        learned = corrections.learn(learned, {"itl": 1.2})
    after = corrections.learn(learned, {"itl": 4.0})
    assert after is not None and learned is not None
    assert after.itl < learned.itl * 1.15


def test_table_round_trips_and_skips_garbage() -> None:
    table = {"a": plans.Correction(1.2, 1.5, 0.7, 3)}
    stored = json.loads(json.dumps(corrections.to_table(table)))
    stored["broken"] = {"itlFactor": "fast"}
    stored["other"] = 7
    assert corrections.from_table(stored) == table
    assert corrections.from_table("nonsense") == {}


def test_material_change() -> None:
    old = plans.Correction(1.0, 1.0, 1.0, 5)
    assert corrections.material_change(None, old)
    assert not corrections.material_change(old, plans.Correction(1.01, 1.0, 1.0, 6))
    assert corrections.material_change(old, plans.Correction(1.0, 1.05, 1.0, 6))


def test_a_plan_uses_the_learned_correction_and_says_so() -> None:
    request = planner.request_from_spec(SPEC)
    inventory = planner.inventory_from_nodes(_nodes())
    plain = planner.plan(request, inventory)
    key = corrections.key(request.model_name, plain.gpu_product or "", plain.tensor_parallel or 0,
                          plain.pipeline_parallel or 0)
    # A factor that keeps the layout chosen (TP4 x PP2 is predicted within 1.5x of TP8's ITL).
    corrected = planner.plan(request, inventory, learned={key: plans.Correction(1.3, 1.3, 1 / 1.3, 12)})
    assert plain.predicted is not None and corrected.predicted is not None
    assert (corrected.tensor_parallel, corrected.pipeline_parallel) == (plain.tensor_parallel, plain.pipeline_parallel)
    assert corrected.predicted.itl_ms == pytest.approx(plain.predicted.itl_ms * 1.3, rel=1e-3)
    assert corrected.predicted.tokens_per_second == pytest.approx(plain.predicted.tokens_per_second / 1.3, rel=1e-3)
    assert "correction learned from 12 observed window(s)" in corrected.reason
    assert "correction" not in plain.reason
    assert corrected.to_dict()["predicted"]["correction"]["itlFactor"] == 1.3


def _plan_dict() -> dict:
    return planner.plan(planner.request_from_spec(SPEC), planner.inventory_from_nodes(_nodes())).to_dict()


def _observed(**changes: float) -> dict:
    base = {"pods": 2, "requests": 100, "promptTokens": 50_000, "outputTokens": 20_000, "running": 8,
            "waiting": 0, "ttftMeanMs": None, "itlMeanMs": None, "outputTokensPerSecond": None}
    return {**base, **changes}


def test_compare_predicts_at_the_observed_load_and_shape() -> None:
    plan = _plan_dict()
    first = replay.compare(SPEC, plan, _observed())
    assert first is not None
    status, _ = first
    assert status["atObservedLoad"] == {"concurrency": 4.0, "promptTokens": 500, "outputTokens": 200}
    itl = status and replay.predict_for_plan(SPEC, plan, concurrency=4, prompt_tokens=500, output_tokens=200)
    assert itl is not None
    slow = replay.compare(SPEC, plan, _observed(itlMeanMs=itl.itl_s * 1e3 * 1.5,
                                                ttftMeanMs=itl.ttft_s * 1e3 * 1.5,
                                                outputTokensPerSecond=2 * itl.tokens_per_s / 1.5))
    assert slow is not None
    status, ratios = slow
    assert status["itlMs"]["ratio"] == 1.5 and status["ttftMs"]["ratio"] == 1.5
    assert status["tokensPerSecond"]["ratio"] == pytest.approx(0.67, abs=0.01)
    assert math.isclose(ratios["itl"], 1.5, rel_tol=1e-6)


def test_compare_needs_traffic_and_a_concrete_plan() -> None:
    assert replay.compare(SPEC, _plan_dict(), _observed(requests=0)) is None
    assert replay.compare(SPEC, {"feasible": False}, _observed()) is None


def test_observed_load_is_the_windows_mean_in_flight_by_littles_law() -> None:
    """A surge earlier in the window shows in its mean latencies; the load must be the window's
    too, not the gauges' current value (which may have drained to nothing)."""
    plan = _plan_dict()
    windowed = replay.compare(SPEC, plan, _observed(running=0, requestsPerSecond=6.0, e2eMeanMs=2000.0))
    assert windowed is not None and windowed[0]["atObservedLoad"]["concurrency"] == 6.0  # 6/s x 2 s / 2 pods
    gauges = replay.compare(SPEC, plan, _observed(running=8))
    assert gauges is not None and gauges[0]["atObservedLoad"]["concurrency"] == 4.0
