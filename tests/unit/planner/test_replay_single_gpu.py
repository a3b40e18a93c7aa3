"""Regression: a one-GPU plan on NVSwitch nodes replays at the observed load (it divided by a 0 GB/s
stage link and took the deployment's whole metrics write down with it)."""

from shardwise.planner import replay

SPEC = {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}, "serving": {"maxModelLen": 4096, "maxConcurrency": 8},
        "parallelism": {"objective": "Cost"}}
OBSERVED = {"pods": 1.0, "requests": 6.0, "promptTokens": 30.0, "outputTokens": 48.0, "running": 0.0,
            "waiting": 0.0, "requestsPerSecond": 2.4, "e2eMeanMs": 46.0, "ttftMeanMs": 11.2, "itlMeanMs": 5.0,
            "outputTokensPerSecond": 19.1}


def test_a_single_gpu_plan_on_an_nvswitch_node_replays() -> None:
    plan = {"feasible": True, "tensorParallel": 1, "pipelineParallel": 1, "gpusPerReplica": 1, "gpusPerNode": 1,
            "nodesPerReplica": 1, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "interconnect": "nvswitch"}
    compared = replay.compare(SPEC, plan, OBSERVED)
    assert compared is not None
    status, ratios = compared
    assert set(ratios) == {"ttft", "itl", "tokens_per_second"} and all(r > 0 for r in ratios.values())
    assert status["itlMs"]["predicted"] > 0
