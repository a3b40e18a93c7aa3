"""The corrections shell against a fake API: read once, learn per window, write only on change."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from shardwise import planner
from shardwise.controller import calibration
from shardwise.kube.client import ApiException
from shardwise.observe.aggregate import Summary

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SPEC = yaml.safe_load((FIXTURES / "deployments" / "llama-3.1-70b.yaml").read_text())["spec"]


class FakeKube:
    def __init__(self, stored: dict[str, Any] | None = None, fail: bool = False) -> None:
        self.configmap = stored
        self.applied: list[dict[str, Any]] = []
        self.fail = fail

    def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return self.configmap

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        if self.fail:
            raise ApiException(status=404, reason="namespaces not found")
        self.applied.append(obj)
        self.configmap = obj
        return obj


def _plan() -> dict[str, Any]:
    nodes = [d for d in yaml.safe_load_all((FIXTURES / "nodes" / "h100-nvswitch-2x8.yaml").read_text()) if d]
    items = [i for d in nodes for i in d.get("items", [d])]
    return planner.plan(planner.request_from_spec(SPEC), planner.inventory_from_nodes(items)).to_dict()


def _summary(itl_ms: float, requests: float = 40) -> Summary:
    return Summary(window_seconds=60, pods=1, requests=requests, prompt_tokens=requests * 400,
                   output_tokens=requests * 100, ttft_p50_ms=None, ttft_p95_ms=None, ttft_p99_ms=None,
                   itl_p50_ms=None, itl_p95_ms=None, e2e_p95_ms=None, queue_p95_ms=None,
                   requests_per_second=1.0, prompt_tokens_per_second=None, output_tokens_per_second=None,
                   running=3, waiting=0, kv_cache_usage=None, ttft_mean_ms=None, itl_mean_ms=itl_ms)


def test_learns_writes_on_material_change_and_reads_back_after_restart() -> None:
    kube = FakeKube()
    plan = _plan()
    first = calibration.Calibrator(kube, "ops")  # type: ignore[arg-type]
    status = first.observe(SPEC, plan, _summary(itl_ms=30.0))
    assert status is not None and status["itlMs"]["observed"] == 30.0
    assert "samples" not in status["correction"]
    first.persist()
    first.persist()  # nothing moved: no second write
    assert len(kube.applied) == 1
    stored = json.loads(kube.applied[0]["data"][calibration.DATA_KEY])
    key = status["correction"]["key"]
    assert stored[key]["samples"] == 1

    restarted = calibration.Calibrator(kube, "ops")  # type: ignore[arg-type]
    assert restarted.table()[key].samples == 1
    assert calibration.read_table(kube, "ops")[key].itl == restarted.table()[key].itl  # type: ignore[arg-type]


def test_quiet_windows_show_the_comparison_but_teach_nothing() -> None:
    kube = FakeKube()
    calibrator = calibration.Calibrator(kube, "ops")  # type: ignore[arg-type]
    status = calibrator.observe(SPEC, _plan(), _summary(itl_ms=30.0, requests=3))
    assert status is not None and "correction" not in status
    calibrator.persist()
    assert kube.applied == []


def test_a_write_that_fails_keeps_learning_in_memory() -> None:
    kube = FakeKube(fail=True)
    calibrator = calibration.Calibrator(kube, "ops")  # type: ignore[arg-type]
    calibrator.observe(SPEC, _plan(), _summary(itl_ms=30.0))
    calibrator.persist()
    assert len(calibrator.table()) == 1
    kube.fail = False
    calibrator.persist()
    assert len(kube.applied) == 1
