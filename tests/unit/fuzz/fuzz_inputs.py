"""Hostile inputs for the fuzz suite: what a careless user, a broken exporter or a mislabelled node
can hand the pure core. Values are drawn near and beyond every boundary: NaN, infinities,
denormals, negatives, 2^32, numbers as strings, None where a value belongs."""

from __future__ import annotations

import collections
import math
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

# Inputs run per target (see conftest's summary line).
RUN: collections.Counter[str] = collections.Counter()


def ran(target: str) -> None:
    RUN[target] += 1


FIXTURES = Path(__file__).parents[2] / "fixtures"

_SPECIAL_NUMBERS = [0, -1, 1, 2, 8, 0.5, 1e-320, 5e-324, 1e308, -1e308, math.nan, math.inf, -math.inf,
                    2**31, 2**32, 2**63, 16_384, 0.04, 0.05, 0.99, 1.0]
numbers = st.one_of(
    st.sampled_from(_SPECIAL_NUMBERS),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
)
number_text = st.one_of(
    numbers.map(str),
    st.sampled_from(["", " 8 ", "x", "NaN", "+Inf", "-Inf", "inf", "1e-320", "1e400", "0x10", "8.0", "1_000"]),
)
# Label values are strings in Kubernetes; offline YAML can carry anything.
label_value = st.one_of(number_text, numbers, st.none(), st.booleans())

MODELS = [
    "meta-llama/Llama-3.2-1B",
    "meta-llama/Llama-3.1-8B-Instruct",
    "meta-llama/Llama-3.1-70B-Instruct",
    "meta-llama/Llama-3.1-405B-Instruct",
    "mistralai/Mixtral-8x7B-Instruct-v0.1",
    "deepseek-ai/DeepSeek-R1",
    "Qwen/Qwen2.5-7B-Instruct",
    "acme/unknown-model",
]
PRODUCTS = [
    "NVIDIA-H100-80GB-HBM3",
    "NVIDIA-L40S",
    "NVIDIA-A100-80GB-PCIe",
    "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb",
    "NVIDIA-H200-SHARED",
    "NVIDIA-GB200",
    "NVIDIA-L4",
    "ACME-X1",
]
KWOK_TOLERATION = {"key": "kwok.x-k8s.io/node", "operator": "Exists", "effect": "NoSchedule"}


def _sometimes(draw: st.DrawFn, good: st.SearchStrategy[Any], p_hostile: float = 0.3) -> Any:
    """Mostly a sensible value, sometimes a hostile one."""
    if draw(st.floats(0, 1)) < p_hostile:
        return draw(label_value)
    return draw(good)


@st.composite
def node(draw: st.DrawFn, index: int) -> dict[str, Any]:
    count = draw(st.sampled_from([1, 2, 4, 8]))
    labels: dict[str, Any] = {"kubernetes.io/hostname": f"n{index}"}
    optional = {
        "nvidia.com/gpu.product": st.sampled_from(PRODUCTS),
        "nvidia.com/gpu.count": st.just(str(count)),
        "nvidia.com/gpu.memory": st.sampled_from(["81559", "46068", "10240", "196608"]),
        "shardwise.io/gpu-interconnect": st.sampled_from(["nvswitch", "nvlink", "pcie"]),
        "shardwise.io/nvlink-domain-size": st.sampled_from(["1", "2", str(count)]),
        "shardwise.io/nvlink-bandwidth-gbps": st.sampled_from(["900", "600", "1800"]),
        "nvidia.com/gpu.clique": st.sampled_from(["c1", "c2"]),
    }
    for key, good in optional.items():
        if draw(st.booleans()) or key in ("nvidia.com/gpu.product", "nvidia.com/gpu.count"):
            labels[key] = _sometimes(draw, good, 0.25)
    status: dict[str, Any] = {}
    for resource in ("allocatable", "capacity"):
        if draw(st.booleans()):
            status[resource] = {"nvidia.com/gpu": _sometimes(draw, st.sampled_from(
                [str(count), "2", "0", str(count * 4)]), 0.3)}
    if draw(st.booleans()):
        status["conditions"] = [{"type": "Ready", "status": draw(st.sampled_from(["True", "False"]))}]
    result: dict[str, Any] = {"kind": "Node", "metadata": {"name": f"n{index}", "labels": labels},
                              "status": status, "spec": {}}
    if draw(st.floats(0, 1)) < 0.05:  # an offline file with the wrong shape somewhere
        where = draw(st.sampled_from(["status", "spec", "labels", "allocatable", "taints", "clique"]))
        junk = draw(st.sampled_from([[], "x", 7, [["a"]], None]))
        if where == "labels":
            result["metadata"]["labels"] = junk
        elif where == "allocatable":
            status["allocatable"] = junk
        elif where == "taints":
            result["spec"] = {"taints": [junk, {"key": "k", "effect": "NoSchedule"}]}
        elif where == "clique":
            labels["nvidia.com/gpu.clique"] = [1]
        else:
            result[where] = junk
    return result


@st.composite
def nodes(draw: st.DrawFn) -> list[dict[str, Any]]:
    return [draw(node(i)) for i in range(draw(st.integers(1, 6)))]


@st.composite
def gpu_pods(draw: st.DrawFn, node_count: int) -> list[dict[str, Any]]:
    pods = []
    for i in range(draw(st.integers(0, 3))):
        request = _sometimes(draw, st.sampled_from(["1", "2", "4"]), 0.4)
        pods.append({
            "metadata": {"name": f"p{i}"},
            "spec": {"nodeName": f"n{draw(st.integers(0, max(0, node_count - 1)))}",
                     "containers": [{"resources": {"requests": {"nvidia.com/gpu": request}}}]},
            "status": {"phase": "Running"},
        })
    return pods


@st.composite
def architecture(draw: st.DrawFn, hostile: float = 1.0) -> dict[str, Any] | None:
    if draw(st.floats(0, 1)) < 1 - 0.5 * hostile:
        return draw(st.sampled_from([None, {}]))
    keys = {
        "parameters": st.sampled_from([7_000_000_000, "70.6B", "1.2T", 8 * 10**9, "1e400"]),
        "activeParameters": st.sampled_from([1_000_000_000, "13B"]),
        "layers": st.integers(1, 130),
        "hiddenSize": st.sampled_from([16, 4096, 8192, 16384]),
        "attentionHeads": st.sampled_from([1, 8, 32, 64, 128]),
        "kvHeads": st.sampled_from([1, 2, 8, 32]),
        "headDim": st.sampled_from([64, 128, 256]),
    }
    arch = {}
    for key, good in keys.items():
        if draw(st.floats(0, 1)) < 0.7:
            arch[key] = _sometimes(draw, good, 0.15 * hostile)
    return arch


@st.composite
def spec(draw: st.DrawFn, hostile: float = 1.0) -> dict[str, Any]:
    """An InferenceDeployment spec, valid or nearly so: a few hostile fields, often none.
    `hostile` scales how often a field is hostile (planning wants mostly valid requests)."""
    model: dict[str, Any] = {"name": draw(st.sampled_from(MODELS if hostile >= 1 else MODELS[:-1]))}
    arch = draw(architecture(hostile))
    if arch is not None or draw(st.booleans()):
        model["architecture"] = arch
    model["dtype"] = _sometimes(draw, st.sampled_from(["bfloat16", "fp8", "float16"]), 0.1 * hostile)
    if draw(st.floats(0, 1)) < 0.15:
        model["quantization"] = draw(st.sampled_from(["awq", "gptq", None, "bnb"]))
    serving = {
        "maxModelLen": _sometimes(draw, st.sampled_from([2048, 8192, 32768, 131072]), 0.15 * hostile),
        "maxConcurrency": _sometimes(draw, st.integers(1, 256), 0.15 * hostile),
        "gpuMemoryUtilization": _sometimes(draw, st.sampled_from([0.05, 0.5, 0.9, 0.99]), 0.2 * hostile),
    }
    parallelism: dict[str, Any] = {"objective": draw(st.sampled_from(["Latency", "Throughput", "Cost"]))}
    if draw(st.floats(0, 1)) < 0.25:
        parallelism["tensor"] = _sometimes(draw, st.sampled_from([1, 2, 4, 8, 16]), 0.2 * hostile)
        parallelism["pipeline"] = _sometimes(draw, st.sampled_from([1, 2, 4]), 0.2 * hostile)
    placement: dict[str, Any] = {"tolerations": [KWOK_TOLERATION]}
    if draw(st.floats(0, 1)) < 0.3:
        placement["gpuProducts"] = draw(st.lists(st.sampled_from(PRODUCTS), max_size=2))
    body: dict[str, Any] = {"model": model, "serving": serving, "parallelism": parallelism,
                            "placement": placement}
    if draw(st.floats(0, 1)) < 0.2:
        body["pricing"] = {"gpuHourUSD": _sometimes(draw, st.sampled_from(["2.49", "0", "$3"]), 0.5 * hostile)}
    return body


price_tables = st.one_of(
    st.none(),
    st.dictionaries(st.sampled_from(PRODUCTS), numbers, max_size=3),
)

# Resource names near every boundary: the longest allowed, one more, dots, leading digits.
resource_names = st.one_of(
    st.from_regex(r"[a-z][-a-z0-9]{0,70}", fullmatch=True),
    st.text(alphabet="abz09-.A_", min_size=0, max_size=80),
    st.integers(40, 70).map(lambda n: "m" * n),
    st.integers(40, 70).map(lambda n: "a" + "-" * (n - 2) + "z"),
    st.sampled_from(["llama.v3", "3llama", "llama-", "-llama", "Llama", "a" * 253, "a" * 254, "", "a"]),
)


@st.composite
def plan_dicts(draw: st.DrawFn) -> dict[str, Any]:
    """A plan as the planner writes it to the status: single-node or a LeaderWorkerSet."""
    nodes_per_replica = draw(st.sampled_from([1, 1, 2, 4]))
    per_node = draw(st.sampled_from([1, 2, 4, 8]))
    gpus = nodes_per_replica * per_node
    tp = draw(st.sampled_from([t for t in (1, 2, 4, 8, 16, 32) if gpus % t == 0]))
    return {
        "feasible": True,
        "tensorParallel": tp,
        "pipelineParallel": gpus // tp,
        "gpusPerReplica": gpus,
        "nodesPerReplica": nodes_per_replica,
        "gpusPerNode": per_node,
        "gpuProduct": draw(st.sampled_from(PRODUCTS[:3] + [None])),
        "interconnect": draw(st.sampled_from(["nvswitch", "pcie"])),
        "reason": "fuzz",
        "reasonCode": "Planned",
        "predicted": {"ttftMs": 100.0, "itlMs": 10.0, "tokensPerSecond": 100.0},
    }


# -- metrics -------------------------------------------------------------------------------------

SCRAPE = (FIXTURES / "vllm-0.32-cpu" / "metrics-t1.txt").read_text()
_VALUE_TEXT = st.one_of(
    st.sampled_from(["NaN", "+Inf", "-Inf", "-1", "1e308", "1e-320", "0", "-0", "1e15", "1e16"]),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
)
_LE_TEXT = st.sampled_from(["NaN", "-1", "1e308", "-Inf", "+Inf", "0", "1e6", "1e7", "0.3"])


@st.composite
def scrapes(draw: st.DrawFn, base: str = SCRAPE) -> str:
    """The real vLLM 0.32 capture with some of the series shardwise reads broken."""
    lines = base.splitlines()
    wanted = [i for i, line in enumerate(lines) if line.startswith("vllm:") and " " in line]
    for i in draw(st.lists(st.sampled_from(wanted), max_size=6, unique=True)):
        name_labels, _ = lines[i].rsplit(" ", 1)
        if 'le="' in name_labels and draw(st.booleans()):
            head, rest = name_labels.split('le="', 1)
            name_labels = f'{head}le="{draw(_LE_TEXT)}{rest[rest.index(chr(34)):]}'
        lines[i] = f"{name_labels} {draw(_VALUE_TEXT)}"
    return "\n".join(lines) + "\n"
