"""EP and DP layouts rendered (issue 38): vLLM 0.32's flags for each, every one in its `--help`.

vLLM (SERVING-SHAPES.md A): `--enable-expert-parallel` shards the experts over TP x DP ranks;
`--data-parallel-size` engines of TP GPUs, `--data-parallel-size-local` of them per node; "
`--max-num-seqs` applies per DP rank"; across nodes the head's `--data-parallel-address` and
`--data-parallel-rpc-port`, workers `--headless --data-parallel-start-rank`.
"""

from __future__ import annotations

from typing import Any

import pytest
from render_builders import OWNER, help_flags, plan, spec
from shardwise.render import children, vllm_args
from shardwise_runtime.launcher import spec as launcher_spec

MOE = {"model": {"name": "deepseek-ai/DeepSeek-V3"}, "serving": {"maxModelLen": 8192, "maxConcurrency": 250}}


def _plan(dp: int, tp: int, ep: int, nodes: int = 1) -> dict[str, Any]:
    return {**plan(tp=tp, nodes=nodes, per_node=dp * tp // nodes), "dataParallel": dp,
            "expertParallel": ep, "gpusPerReplica": dp * tp}


def _flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


@pytest.mark.parametrize("layout, dp, tp, ep", [
    ("TP8xEP8", 1, 8, 8), ("DP8xTP1xEP8", 8, 1, 8), ("DP2xTP4xEP8", 2, 4, 8), ("DP2xTP4", 2, 4, 1),
])
def test_single_node_flags(layout: str, dp: int, tp: int, ep: int) -> None:
    args = vllm_args.build_serve_args(spec(**MOE), _plan(dp, tp, ep), "m")
    assert _flag(args, "--tensor-parallel-size") == str(tp)
    assert ("--enable-expert-parallel" in args) == (ep > 1)
    assert _flag(args, "--data-parallel-size") == (str(dp) if dp > 1 else None)
    assert _flag(args, "--data-parallel-size-local") == (str(dp) if dp > 1 else None)
    assert _flag(args, "--max-num-seqs") == str(-(-250 // dp))  # per DP rank: 250 streams in all
    assert {a for a in args if a.startswith("-")} <= help_flags()


def test_a_plan_without_dp_fields_renders_as_before() -> None:
    args = vllm_args.build_serve_args(spec(**MOE), plan(tp=8), "m")
    assert "--enable-expert-parallel" not in args and "--data-parallel-size" not in args
    assert _flag(args, "--max-num-seqs") == "250"


def test_dp_over_two_nodes_is_one_leaderworkerset_group_with_the_dp_launch() -> None:
    lws = children.render(OWNER, spec(**MOE), _plan(2, 8, 16, nodes=2), 1, runtime_image="r")[0]
    assert lws["kind"] == "LeaderWorkerSet"
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2
    argv = {}
    for role, index in (("leader", "0"), ("worker", "1")):
        container = template[f"{role}Template"]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "8"
        args = container["args"]
        split = args.index("--")
        launch = launcher_spec.build_launch(
            launcher_spec.LaunchInputs(interconnect=launcher_spec.Interconnect(args[1]),
                                       serve_args=tuple(args[split + 1:]), nodes=2),
            {"LWS_WORKER_INDEX": index, "LWS_LEADER_ADDRESS": "m-0.m", "POD_IP": "10.0.0.2"})
        argv[role] = launch.argv[2:]
        assert {a for a in argv[role] if a.startswith("-")} <= help_flags()
    leader, worker = argv["leader"], argv["worker"]
    assert _flag(leader, "--data-parallel-size") == "2" and _flag(leader, "--data-parallel-size-local") == "1"
    assert _flag(leader, "--data-parallel-address") == "m-0.m" == _flag(worker, "--data-parallel-address")
    assert _flag(leader, "--data-parallel-rpc-port") == _flag(worker, "--data-parallel-rpc-port")
    assert "--headless" not in leader and "--headless" in worker
    assert _flag(worker, "--data-parallel-start-rank") == "1"
    assert "--nnodes" not in leader + worker
