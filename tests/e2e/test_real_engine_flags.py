"""Every `vllm serve` flag the operator can render, through the REAL vLLM 0.32 parser.

Renders the serving container for each precision (bf16, fp16, fp8, AWQ, GPTQ), single-node and
multi-node layouts (leader and worker after `shardwise-launch` added its multi-node flags, and the
`--master-port`/`--host` the local fleet adds), and hands every argument list to vLLM's own CLI
parser, its serve-argument validation and its engine-argument construction (nothing is started).
Flags accepted here can still need a GPU to run: see docs/real-engine.md for which.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest
from shardwise_runtime.launcher import spec as launch_spec
from shardwise_runtime.sim import real

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children
from tests.e2e import real_engine_support as rs
from tests.e2e.support import ROOT

pytestmark = [pytest.mark.e2e, pytest.mark.real_engine, pytest.mark.timeout(1800)]  # a cold install: minutes

OWNER = children.Owner(name="m", namespace="ns", uid="u")
PRECISIONS = [{"dtype": "auto"}, {"dtype": "bfloat16"}, {"dtype": "float16"}, {"dtype": "fp8"},
              {"dtype": "float16", "quantization": "awq"}, {"dtype": "float16", "quantization": "gptq"}]
# What the planner says is loaded (status.plan.weights) for the fp8 case: --quantization fp8 with
# --dtype auto; the other precisions render from plans that predate `weights`, as stored plans do.
WEIGHTS = {"fp8": {"format": "fp8", "storedFormat": "bfloat16", "quantization": "fp8"}}


def _plan(tp: int, pp: int, nodes: int, weights: dict[str, Any] | None = None) -> dict[str, Any]:
    return {**({"weights": weights} if weights else {}), "feasible": True, "tensorParallel": tp, "pipelineParallel": pp, "gpusPerReplica": tp * pp,
            "nodesPerReplica": nodes, "gpusPerNode": tp * pp // nodes, "gpuProduct": "NVIDIA-H100-80GB-HBM3",
            "interconnect": "nvswitch", "memory": {"weightsGiBPerGPU": 40.0}}


def _rendered_serve_args() -> dict[str, list[str]]:
    """name -> the argument list after `vllm serve`, exactly as the container would run it."""
    out: dict[str, list[str]] = {}
    for precision in PRECISIONS:
        spec = InferenceDeploymentSpec.model_validate({
            "model": {"name": "meta-llama/Llama-3.1-70B-Instruct", "servedName": "llama", **precision},
            "serving": {"maxModelLen": 8192, "maxConcurrency": 16, "gpuMemoryUtilization": 0.92}})
        tag = "+".join(precision.values())
        weights = WEIGHTS.get(str(precision.get("dtype")))
        single = children.render(OWNER, spec, _plan(8, 1, 1, weights), 1)[0]
        container = single["spec"]["template"]["spec"]["containers"][0]
        assert container["command"] == ["vllm", "serve"]
        out[f"{tag} single-node"] = container["args"]
        lws = children.render(OWNER, spec, _plan(8, 2, 2, weights), 1, runtime_image="r")[0]
        template = lws["spec"]["leaderWorkerTemplate"]
        for role, index in (("leader", "0"), ("worker", "1")):
            args = template[f"{role}Template"]["spec"]["containers"][0]["args"]
            split = args.index("--")
            launch = launch_spec.build_launch(
                launch_spec.LaunchInputs(interconnect=launch_spec.Interconnect(args[1]),
                                         serve_args=tuple(args[split + 1:]), nodes=2),
                {"LWS_WORKER_INDEX": index, "LWS_LEADER_ADDRESS": "10.0.0.1", "POD_IP": "10.0.0.2"})
            assert launch.argv[:2] == ["vllm", "serve"]
            out[f"{tag} {role}"] = launch.argv[2:]
    out.update(_expert_parallel_args())
    # What the local fleet adds to a rendered container.
    out["local fleet additions"] = [*out["bfloat16 leader"], "--host", "127.0.0.9", "--master-port", "29777"]
    return out


def _expert_parallel_args() -> dict[str, list[str]]:
    """EP and DP layouts (issue 38): TP8xEP8 and DP8xTP1xEP8 on one node; DP4xTP4xEP16 over two
    nodes, leader and worker after the launcher added vLLM's multi-node DP flags."""
    spec = InferenceDeploymentSpec.model_validate({
        "model": {"name": "Qwen/Qwen3-30B-A3B", "servedName": "moe"},
        "serving": {"maxModelLen": 8192, "maxConcurrency": 64}})
    out: dict[str, list[str]] = {}
    for label, (dp, tp, ep, nodes) in {"TP8xEP8": (1, 8, 8, 1), "DP8xTP1xEP8": (8, 1, 8, 1),
                                       "DP2xTP4": (2, 4, 1, 1)}.items():
        plan = {**_plan(tp, 1, 1), "dataParallel": dp, "expertParallel": ep, "gpusPerNode": dp * tp}
        container = children.render(OWNER, spec, plan, 1)[0]["spec"]["template"]["spec"]["containers"][0]
        out[label] = container["args"]
    plan = {**_plan(4, 1, 2), "dataParallel": 4, "expertParallel": 16, "gpusPerNode": 8}
    template = children.render(OWNER, spec, plan, 1, runtime_image="r")[0]["spec"]["leaderWorkerTemplate"]
    for role, index in (("leader", "0"), ("worker", "1")):
        args = template[f"{role}Template"]["spec"]["containers"][0]["args"]
        split = args.index("--")
        launch = launch_spec.build_launch(
            launch_spec.LaunchInputs(interconnect=launch_spec.Interconnect(args[1]),
                                     serve_args=tuple(args[split + 1:]), nodes=2),
            {"LWS_WORKER_INDEX": index, "LWS_LEADER_ADDRESS": "10.0.0.1", "POD_IP": "10.0.0.2"})
        out[f"DP4xTP4xEP16 {role}"] = launch.argv[2:]
    return out


def test_every_rendered_flag_is_accepted_by_the_real_vllm_parser() -> None:
    home = rs.install_real_engine()
    cases = _rendered_serve_args()
    # The model is a name, not a flag, and the hub is out of reach: the local model stands in.
    model = str(home / "models" / real.MODEL_NAME)
    argvs = [[model, *args[1:]] for args in cases.values()]
    argvs.append([model, "--no-such-flag", "1"])  # the control: the parser does reject
    result = subprocess.run([str(home / "venv/bin/python"), str(ROOT / "tests/e2e/vllm_parse_args.py")],
                            input=json.dumps(argvs), capture_output=True, text=True,
                            timeout=600, env={"PATH": "/usr/bin:/bin", "HOME": str(home),
                                              "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    *verdicts, control = json.loads(result.stdout.strip().splitlines()[-1])
    assert not control["ok"] and "--no-such-flag" in control["error"]
    rejected = {name: v["error"] for name, v in zip(cases, verdicts) if not v["ok"]}
    assert rejected == {}
    flags = sorted({a.split("=")[0] for args in cases.values() for a in args if a.startswith("--")})
    print(f"\n{len(cases)} rendered argument lists accepted; flags: {' '.join(flags)}")
    assert {"--headless", "--nnodes", "--master-addr", "--quantization", "--dtype"} <= set(flags)
    assert {"--enable-expert-parallel", "--data-parallel-size", "--data-parallel-size-local",
            "--data-parallel-address", "--data-parallel-rpc-port", "--data-parallel-start-rank"} <= set(flags)
