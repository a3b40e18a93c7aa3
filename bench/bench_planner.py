"""Planning time against large inventories: the planner runs on every spec change, so it must stay
fast on big clusters. Targets: under 20 ms for 1,000 nodes and under 200 ms for 10,000.

Identical nodes are grouped into pools when the inventory is built, so the search is per pool and
only placement filtering and capacity checks touch every node. Prints the median of several runs of
`inventory_from_nodes()` (parsing Node/Pod dicts, paid once per reconcile and shared by all
deployments), of `plan()` per spec, and of both together (planning from the Node and Pod dicts,
what the targets are about), each total judged against the target.
Run: `.venv/bin/python bench/bench_planner.py` (part of `make bench`).
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable
from typing import Any

from shardwise import planner

TOLERATE_KWOK = [{"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}]
SPECS: dict[str, dict[str, Any]] = {
    "70B Latency": {"model": {"name": "meta-llama/Llama-3.1-70B-Instruct"}},
    "405B multi-node": {"model": {"name": "meta-llama/Llama-3.1-405B-Instruct"}},
    "8B Cost, node selector": {
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct"},
        "parallelism": {"objective": "Cost"},
        "placement": {"nodeSelector": {"zone": "zone-b"}},
    },
    "DeepSeek-R1 fp8 Throughput": {
        "model": {"name": "deepseek-ai/DeepSeek-R1", "dtype": "fp8"},
        "parallelism": {"objective": "Throughput"},
    },
    # Mixtures of experts search EP and DP layouts too (issue 38): the enlarged layout space.
    "Qwen3-235B-A22B EP/DP 256 streams": {
        "model": {"name": "Qwen/Qwen3-235B-A22B"},
        "parallelism": {"objective": "Throughput"},
        "serving": {"maxConcurrency": 256},
        "workload": {"concurrency": 256},
    },
    "Mixtral EP/DP Latency": {"model": {"name": "mistralai/Mixtral-8x7B-Instruct-v0.1"}},
    # A spec pinned to another engine (issue 40): its memory reading and fitted factor.
    "DeepSeek-R1 fp8 on SGLang": {"engine": "sglang",
                                  "model": {"name": "deepseek-ai/DeepSeek-R1", "dtype": "fp8"}},
}
# (share of nodes, product, GPUs, interconnect, NVLink domain, clique size or 0)
FLEET = [
    (0.4, "NVIDIA-H100-80GB-HBM3", 8, "nvswitch", 8, 0),
    (0.3, "NVIDIA-L40S", 4, "pcie", 1, 0),
    (0.2, "NVIDIA-A100-80GB-PCIe", 4, "nvlink", 2, 0),
    (0.1, "NVIDIA-GB200", 4, "nvswitch", 4, 18),
]


def build_cluster(size: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for share, product, gpus, interconnect, domain, clique_size in FLEET:
        for i in range(int(size * share)):
            name = f"{product.lower()}-{i}"
            labels = {
                "kubernetes.io/hostname": name,
                "zone": f"zone-{'abc'[i % 3]}",
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(gpus),
                "shardwise.io/gpu-interconnect": interconnect,
                "shardwise.io/nvlink-domain-size": str(domain),
            }
            if clique_size:
                labels["nvidia.com/gpu.clique"] = f"fabric-0.{i // clique_size}"
            nodes.append(
                {
                    "metadata": {"name": name, "labels": labels},
                    "spec": {
                        "taints": [
                            {"key": "kwok.x-k8s.io/node", "value": "fake", "effect": "NoSchedule"}
                        ]
                    },
                    "status": {
                        "allocatable": {"nvidia.com/gpu": str(gpus)},
                        "conditions": [{"type": "Ready", "status": "True"}],
                    },
                }
            )
            if i % 2:  # half the nodes run something
                pods.append(
                    {
                        "spec": {
                            "nodeName": name,
                            "containers": [
                                {"resources": {"limits": {"nvidia.com/gpu": str(gpus // 2)}}}
                            ],
                        },
                        "status": {"phase": "Running"},
                    }
                )
    return nodes, pods


def median_ms(action: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _inventory_and_plan(
    nodes: list[dict[str, Any]], pods: list[dict[str, Any]], request: planner.PlanRequest
) -> object:
    return planner.plan(request, planner.inventory_from_nodes(nodes, pods))


def _verdict(took: float, target: float) -> str:
    return f"ok, {took / target:.0%} of target" if took < target else f"OVER {target:.0f} ms target"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    targets = {1000: 20.0, 10000: 200.0}
    print(f"planner bench, median of {args.runs} runs")
    for size, target in targets.items():
        nodes, pods = build_cluster(size)
        inventory = planner.inventory_from_nodes(nodes, pods)
        build = median_ms(functools.partial(planner.inventory_from_nodes, nodes, pods), args.runs)
        print(
            f"\n{size:,} nodes ({len(inventory.pools)} pools, {len(pods):,} pods): "
            f"inventory_from_nodes {build:.1f} ms; total = inventory + plan, target {target:.0f} ms"
        )
        worst = 0.0
        for label, spec in SPECS.items():
            spec = {
                **spec,
                "placement": {**spec.get("placement", {}), "tolerations": TOLERATE_KWOK},
            }
            request = planner.request_from_spec(spec)
            result = planner.plan(request, inventory)
            took = median_ms(functools.partial(planner.plan, request, inventory), args.runs)
            total = median_ms(
                functools.partial(_inventory_and_plan, nodes, pods, request), args.runs
            )
            worst = max(worst, total)
            layout = result.layout or f"TP{result.tensor_parallel}xPP{result.pipeline_parallel}"
            print(
                f"  plan {label:<34} {took:6.2f} ms  total {total:7.2f} ms  "
                f"({_verdict(total, target)})  -> {layout} on {result.gpu_product}"
            )
        print(
            f"  slowest total {worst:.1f} ms against the {target:.0f} ms target: "
            f"{_verdict(worst, target)}"
        )


if __name__ == "__main__":
    main()
