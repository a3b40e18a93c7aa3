"""Prefill-only and decode-only simulated engines: the role read from the operator's own rendered
argv (--kv-transfer-config) and labels, the prefill answer carrying kv_transfer_params, and a decode
engine that loads a prompt's KV (the hand-off and one step) instead of computing it."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import disaggregation
from shardwise.render.pod import Owner
from shardwise_runtime.sim import handoff, pods
from sim_support import serving

OWNER = Owner(name="pd", namespace="ns", uid="u")
PLAN = {"feasible": True, "tensorParallel": 1, "pipelineParallel": 1, "gpusPerReplica": 1, "gpusPerNode": 1,
        "nodesPerReplica": 1, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "maxModelLen": 8192, "maxNumSeqs": 16,
        "parameters": 7.6e9}


def rendered_pod(connector: str, role: str, ip: str) -> dict[str, Any]:
    """A Running pod made from the operator's rendered role Deployment, as KWOK would run it."""
    spec = InferenceDeploymentSpec.model_validate({
        "model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "serving": {"maxModelLen": 8192},
        "disaggregation": {"mode": "Disaggregated", "connector": connector,
                           "sharedStorage": {"claimName": "kv"} if connector == "ExampleConnector" else {}}})
    template = disaggregation.build_role_deployment(OWNER, spec, PLAN, role)["spec"]["template"]
    return {"metadata": {"name": f"pd-{role}-0", "namespace": "ns", "uid": f"u-{role}",
                         "labels": dict(template["metadata"]["labels"]),
                         "annotations": dict(template["metadata"].get("annotations") or {})},
            "spec": template["spec"], "status": {"phase": "Running", "podIP": ip}}


@pytest.mark.parametrize("connector", ["ExampleConnector", "NixlConnector"])
def test_the_role_and_connector_come_from_the_rendered_pod(connector: str) -> None:
    prefill = pods.engine_config_from_pod(rendered_pod(connector, "prefill", "127.0.0.10"))
    decode = pods.engine_config_from_pod(rendered_pod(connector, "decode", "127.0.0.11"))
    assert prefill is not None and decode is not None
    assert (prefill.role, decode.role) == ("prefill", "decode")
    assert prefill.kv_connector == decode.kv_connector == connector


def test_kv_both_without_a_role_label_is_an_aggregated_engine() -> None:
    config = handoff.kv_transfer_config('{"kv_connector":"NixlConnector","kv_role":"kv_both"}')
    assert handoff.role_of(config, {}) is None
    assert handoff.role_of(config, {handoff.ROLE_LABEL: "decode"}) == "decode"
    assert handoff.role_of(handoff.kv_transfer_config("not json"), {handoff.ROLE_LABEL: "decode"}) is None


def test_the_hand_off_grows_with_the_prompt_and_is_slower_through_files() -> None:
    assert handoff.handoff_s("NixlConnector", 8000) > handoff.handoff_s("NixlConnector", 1000)
    assert handoff.handoff_s("ExampleConnector", 1000) > 10 * handoff.handoff_s("NixlConnector", 1000)


LONG = {"model": "tiny", "prompt": "x" * 4 * 4000, "max_tokens": 1}  # 4,000 tokens (characters / 4)


async def _timed(http: httpx.AsyncClient, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    start = time.monotonic()
    response = await http.post("/v1/completions", json=body)
    assert response.status_code == 200, response.text
    return time.monotonic() - start, response.json()


@pytest.mark.anyio
async def test_prefill_hands_kv_params_to_decode_which_loads_instead_of_computing() -> None:
    changes = {"ttft_ms": 100.0, "itl_ms": 5.0, "max_model_len": 8192, "kv_connector": "NixlConnector"}
    async with (serving(role="prefill", **changes) as prefill, serving(role="decode", **changes) as decode,
                httpx.AsyncClient(base_url=prefill.url) as p, httpx.AsyncClient(base_url=decode.url) as d):
        prefilled_s, first = await _timed(p, LONG)
        params = first["kv_transfer_params"]
        assert params["do_remote_prefill"] is True and params["remote_host"] == "127.0.0.1"
        loaded_s, answer = await _timed(d, {**LONG, "max_tokens": 8, "kv_transfer_params": params})
        computed_s, alone = await _timed(d, {**LONG, "max_tokens": 8})
    assert answer.get("kv_transfer_params") is None and alone.get("kv_transfer_params") is None  # vLLM's null
    assert answer["usage"]["completion_tokens"] == alone["usage"]["completion_tokens"] == 8
    # Prefilling 4,000 tokens: 100 ms x (0.5 + 0.5 x 4000/512) ~ 440 ms, on either engine; the
    # hand-off of the same prompt is ~11 ms and 8 decode steps ~40 ms.
    assert prefilled_s > 0.3 and computed_s > 0.3, (prefilled_s, computed_s)
    assert loaded_s < computed_s / 3, (loaded_s, computed_s)
