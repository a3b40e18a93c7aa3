"""The launch decided from arguments and environment: command lines, env, group, checks."""

from typing import Any

import pytest

from shardwise_runtime import vllm_flags
from shardwise_runtime.launcher import spec

NVSWITCH, PCIE = spec.Interconnect.NVSWITCH, spec.Interconnect.PCIE
LWS_LEADER = {"LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "0",
              "LWS_LEADER_ADDRESS": "llama-405b-0.llama-405b.ml", "POD_IP": "10.1.0.7"}
LWS_WORKER = {**LWS_LEADER, "LWS_WORKER_INDEX": "1", "POD_IP": "10.1.0.8"}


def build(serve_args: list[str], env: dict[str, str] | None = None,
          interconnect: spec.Interconnect = NVSWITCH, **inputs: Any) -> spec.LaunchSpec:
    return spec.build_launch(spec.LaunchInputs(interconnect=interconnect,
                                               serve_args=tuple(serve_args), **inputs),
                             env or {})


def test_single_node_tensor_parallel() -> None:
    launch = build(["meta-llama/Llama-3.1-70B-Instruct", "--tensor-parallel-size", "4",
                    "--max-model-len", "8192"], {"POD_IP": "10.1.0.5"})
    assert launch.argv == ["vllm", "serve", "meta-llama/Llama-3.1-70B-Instruct",
                           "--tensor-parallel-size", "4", "--max-model-len", "8192"]
    assert launch.env == {"VLLM_HOST_IP": "10.1.0.5"}
    assert launch.rendezvous is None
    assert launch.model_path is None
    assert launch.min_shm_bytes == 1024 * 2**20


def test_single_node_tensor_and_pipeline_parallel() -> None:
    launch = build(["/models/llama-70b", "-tp", "2", "-pp", "2"], min_shm_mib=2048)
    assert launch.argv == ["vllm", "serve", "/models/llama-70b", "-tp", "2", "-pp", "2"]
    assert launch.model_path == "/models/llama-70b"
    assert launch.min_shm_bytes == 2048 * 2**20


def test_one_gpu_needs_no_shared_memory() -> None:
    assert build(["Qwen/Qwen2.5-7B-Instruct"]).min_shm_bytes == 0


def test_multi_node_leader_from_lws_environment() -> None:
    launch = build(["meta-llama/Llama-3.1-405B-Instruct", "--tensor-parallel-size=8",
                    "--pipeline-parallel-size=2"], LWS_LEADER)
    assert launch.argv[5:] == ["--distributed-executor-backend", "mp", "--nnodes", "2",
                               "--node-rank", "0", "--master-addr", "llama-405b-0.llama-405b.ml"]
    assert launch.rendezvous == spec.Rendezvous(
        role=spec.Role.LEADER, leader_address="llama-405b-0.llama-405b.ml", port=29400, nodes=2,
        node_rank=0, timeout_s=600.0)
    assert launch.env == {"VLLM_HOST_IP": "10.1.0.7"}
    assert launch.min_shm_bytes > 0  # 16 GPUs over 2 nodes: 8 per pod


def test_multi_node_worker_from_lws_environment_is_headless() -> None:
    launch = build(["meta-llama/Llama-3.1-405B-Instruct", "-tp", "8", "-pp", "2"], LWS_WORKER,
                   group_timeout_s=120.0)
    assert launch.argv[-7:] == ["--nnodes", "2", "--node-rank", "1", "--master-addr",
                                "llama-405b-0.llama-405b.ml", "--headless"]
    assert launch.rendezvous is not None
    assert (launch.rendezvous.role, launch.rendezvous.timeout_s) == (spec.Role.WORKER, 120.0)
    assert launch.env["VLLM_HOST_IP"] == "10.1.0.8"


def test_flags_win_over_the_environment() -> None:
    launch = build(["m/m", "-tp", "4", "-pp", "3"], LWS_WORKER, nodes=3, node_rank=2,
                   role=spec.Role.WORKER, leader_address="10.9.9.9")
    assert launch.rendezvous == spec.Rendezvous(spec.Role.WORKER, "10.9.9.9", 29400, 3, 2, 600.0)


@pytest.mark.parametrize("serve_args, env", [
    (["Qwen/Qwen2.5-7B-Instruct", "-tp", "4", "--max-num-seqs", "64",
      "--gpu-memory-utilization", "0.9", "--served-model-name", "qwen"], {}),
    (["meta-llama/Llama-3.1-405B-Instruct", "-tp", "8", "-pp", "2"], LWS_LEADER),
    (["meta-llama/Llama-3.1-405B-Instruct", "-tp", "8", "-pp", "2"], LWS_WORKER),
])
def test_every_emitted_flag_exists_in_vllm_0_32(serve_args: list[str],
                                                env: dict[str, str]) -> None:
    launch = build(serve_args, env)
    assert launch.argv[:2] == ["vllm", "serve"]
    assert vllm_flags.unknown_flags(launch.argv[3:]) == []
    assert launch.warnings == ()


def test_pcie_disables_nccl_peer_to_peer_unless_the_pod_says_otherwise() -> None:
    assert build(["m/m", "-tp", "2"], interconnect=PCIE).env == {"NCCL_P2P_DISABLE": "1"}
    assert build(["m/m", "-tp", "2"], {"NCCL_P2P_DISABLE": "0"}, interconnect=PCIE).env == {}
    assert "NCCL_P2P_DISABLE" not in build(["m/m", "-tp", "2"]).env


def test_unknown_serve_flag_is_warned_about_and_passed_on() -> None:
    launch = build(["m/m", "--max-model-length", "8192"])
    assert launch.argv[-2:] == ["--max-model-length", "8192"]
    assert launch.warnings == ("--max-model-length is not a vllm 0.32 serve flag; passing it on",)


def test_missing_pod_ip_on_a_group_is_warned_about() -> None:
    env = {k: v for k, v in LWS_LEADER.items() if k != "POD_IP"}
    assert any("POD_IP" in w for w in build(["m/m", "-tp", "8", "-pp", "2"], env).warnings)


@pytest.mark.parametrize("model, path", [
    ("/models/llama", "/models/llama"), ("./llama", "./llama"),
    ("meta-llama/Llama-3.1-8B", None), ("facebook/opt-125m", None),
])
def test_only_paths_written_as_paths_are_checked(model: str, path: str | None) -> None:
    assert spec.local_model_path(model) == path


@pytest.mark.parametrize("serve_args, env, inputs, message", [
    ([], {}, {}, "must start with the model"),
    (["--model", "m/m"], {}, {}, "must start with the model"),
    (["m/m", "-tp", "8", "-pp", "2"], {"LWS_GROUP_SIZE": "2"}, {}, "--leader-address"),
    (["m/m", "-tp", "8", "-pp", "2", "--nnodes", "2"], LWS_LEADER, {}, "remove them"),
    (["m/m", "-tp", "8", "-pp", "2", "--headless"], LWS_WORKER, {}, "--headless"),
    (["m/m", "-tp", "3"], LWS_LEADER, {}, "does not divide over 2 nodes"),
    (["m/m", "-tp", "8", "-pp", "2"], {**LWS_LEADER, "LWS_WORKER_INDEX": "2"}, {}, "outside"),
    (["m/m", "-tp", "8", "-pp", "2"], LWS_WORKER, {"role": spec.Role.LEADER, "node_rank": 1},
     "contradicts role leader"),
    (["m/m", "-tp", "8", "-pp", "2"], {"LWS_LEADER_ADDRESS": "x"},
     {"nodes": 2, "role": spec.Role.WORKER}, "--node-rank"),
    (["m/m"], {}, {"role": spec.Role.WORKER}, "above 1"),
    (["m/m", "-tp", "two"], {}, {}, "needs an integer"),
    (["m/m"], {"LWS_GROUP_SIZE": "many"}, {}, "LWS_GROUP_SIZE must be an integer"),
    (["m/m", "-tp", "8", "-pp", "2"], LWS_LEADER, {"group_timeout_s": 0.0}, "positive"),
    (["m/m"], {}, {"nodes": 0}, "at least 1"),
    (["m/m"], {"LWS_GROUP_SIZE": "0"}, {}, "at least 1"),
])
def test_inconsistent_launches_are_usage_errors(serve_args: list[str], env: dict[str, str],
                                               inputs: dict[str, Any], message: str) -> None:
    with pytest.raises(spec.UsageError, match=message):
        build(serve_args, env, **inputs)


# --- DP attention over nodes (issue 38): vLLM's multi-node DP launch, not --nnodes -------------

DP_ARGS = ["deepseek-ai/DeepSeek-V3", "--tensor-parallel-size", "8", "--pipeline-parallel-size", "1",
           "--data-parallel-size", "2", "--data-parallel-size-local", "1", "--enable-expert-parallel"]


def test_dp_leader_gets_the_dp_address_and_rpc_port() -> None:
    launch = build(DP_ARGS, LWS_LEADER)
    assert launch.argv == ["vllm", "serve", *DP_ARGS, "--data-parallel-address",
                           "llama-405b-0.llama-405b.ml", "--data-parallel-rpc-port", "29550"]
    assert launch.rendezvous is not None and launch.rendezvous.nodes == 2
    assert not vllm_flags.unknown_flags(launch.argv[3:])


def test_dp_worker_runs_its_ranks_headless_from_its_start_rank() -> None:
    args = [*DP_ARGS[:5], "--data-parallel-size", "16", "--data-parallel-size-local", "8"]
    args[2] = "1"  # DP16 x TP1 over two nodes: 8 ranks on each
    launch = build(args, LWS_WORKER)
    assert launch.argv[-7:] == ["--data-parallel-address", "llama-405b-0.llama-405b.ml",
                                "--data-parallel-rpc-port", "29550", "--headless",
                                "--data-parallel-start-rank", "8"]
    assert "--nnodes" not in launch.argv and "--master-addr" not in launch.argv


def test_dp_that_does_not_divide_over_the_nodes_is_refused() -> None:
    with pytest.raises(spec.UsageError, match="--data-parallel-size-local 3 on 2 nodes"):
        build([*DP_ARGS[:5], "--data-parallel-size", "4", "--data-parallel-size-local", "3"], LWS_LEADER)
    with pytest.raises(spec.UsageError, match="launcher sets --data-parallel-address"):
        build([*DP_ARGS, "--data-parallel-address", "x"], LWS_LEADER)
