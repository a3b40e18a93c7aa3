"""Which engines the fleet should run, read from Pod objects: pure functions, no API calls.

The operator renders each serving pod with `vllm serve` arguments, a node affinity naming the GPU
product and an annotation with the model's parameter count; KWOK gives the pod a loopback IP. The
engine's base latencies come from measured figures for that GPU and model size (measured.py), never
from the planner's predictions. From that the fleet derives one
`EngineConfig` per pod that should answer like vLLM, and the changes that bring the running
engines to that set. Keeping this pure lets every rule (leaders only, loopback only, argument
forms, fallbacks) be tested without a cluster.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import shlex
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from shardwise_runtime.sim import config as sim_config
from shardwise_runtime.sim import handoff, measured
from shardwise_runtime.sim.config import VLLM_PORT, EngineConfig

INFERENCE_LABEL = "shardwise.io/inference-deployment"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
MAX_CONCURRENCY_ANNOTATION = "shardwise.io/max-concurrency"
PARAMETERS_ANNOTATION = "shardwise.io/model-parameters"
SLOWDOWN_ANNOTATION = "shardwise.io/sim-slowdown"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
_WEIGHT_BYTES = {"fp8": 1.0, "awq": 0.5, "gptq": 0.5}

_LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
_DEFAULTS = EngineConfig(host="127.0.0.1", model="-", served_model_names=("-",))


@dataclasses.dataclass(frozen=True)
class VllmArgs:
    """The few `vllm serve` arguments the simulator imitates."""

    model: str | None = None
    served_model_names: tuple[str, ...] = ()
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    quantization: str | None = None
    enable_lora: bool = False
    max_lora_rank: int | None = None
    max_loras: int | None = None
    max_cpu_loras: int | None = None
    lora_modules: tuple[str, ...] = ()
    kv_transfer_config: str | None = None


@dataclasses.dataclass(frozen=True)
class FleetChanges:
    """Engines to stop (first) and to start, by pod key."""

    stop: tuple[str, ...]
    start: tuple[str, ...]


def _tokens(argv: Sequence[str]) -> list[str]:
    # `sh -c "vllm serve ..."` hides the arguments in one string; split such strings too.
    tokens: list[str] = []
    for item in argv:
        # A JSON value (`--lora-modules '{"name": ...}'`) is one argument, spaces and all.
        split = any(c.isspace() for c in item) and not item.lstrip().startswith(("{", "["))
        tokens.extend(shlex.split(item) if split else [item])
    return tokens


def _int(text: str | None) -> int | None:
    """vLLM's integers, including its `8k` (x1000) and `8K` (x1024) forms; None if unreadable."""
    if not text:
        return None
    scale = {"k": 1000, "K": 1024, "m": 1000**2, "M": 1024**2}.get(text[-1], 1)
    try:
        value = int(text[:-1] if scale != 1 else text) * scale
    except ValueError:
        return None
    return value if value > 0 else None


def parse_vllm_args(argv: Sequence[str]) -> VllmArgs:
    """Read model, served names, context length, batch size and TP from a `vllm serve` argv."""
    tokens = _tokens(argv)
    values: dict[str, list[str]] = {}
    positional: str | None = None
    if "serve" in tokens:
        after = tokens[tokens.index("serve") + 1 :]
        if after and not after[0].startswith("-"):
            positional = after[0]
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("--"):
            continue
        name, eq, inline = token[2:].partition("=")
        if eq:
            values[name] = [inline]
            continue
        collected = []
        while index < len(tokens) and (
            not tokens[index].startswith("-") or tokens[index].startswith(("{", "["))
        ):
            collected.append(tokens[index])
            index += 1
        values[name] = collected
    model = values["model"][0] if values.get("model") else positional
    served = tuple(values.get("served-model-name", ()))
    first = {name: (found[0] if found else None) for name, found in values.items()}
    return VllmArgs(
        model=model,
        served_model_names=served,
        max_model_len=_int(first.get("max-model-len")),
        max_num_seqs=_int(first.get("max-num-seqs")),
        tensor_parallel_size=_int(first.get("tensor-parallel-size")),
        pipeline_parallel_size=_int(first.get("pipeline-parallel-size")),
        quantization=first.get("quantization"),
        # argparse's last-wins does not survive the dict; --no-enable-lora is the rarer spelling.
        enable_lora="enable-lora" in values and "no-enable-lora" not in values,
        max_lora_rank=_int(first.get("max-lora-rank")),
        max_loras=_int(first.get("max-loras")),
        max_cpu_loras=_int(first.get("max-cpu-loras")),
        lora_modules=tuple(values.get("lora-modules", ())),
        kv_transfer_config=first.get("kv-transfer-config"),
    )


def engine_of(argv: Sequence[str]) -> str:
    """Which program an argv starts: `sglang` (python -m sglang.launch_server, sglang serve),
    `trtllm` (trtllm-serve) or `vllm` (anything else, as before engines were told apart)."""
    tokens = _tokens(argv)
    for index, token in enumerate(tokens):
        name = token.rsplit("/", 1)[-1]
        if token == "sglang.launch_server" or (name == "sglang" and tokens[index + 1:index + 2] == ["serve"]):
            return "sglang"
        if name == "trtllm-serve":
            return "trtllm"
    return "vllm"


# SGLang's and trtllm-serve's spellings of the flags the simulator reads, in vLLM's names.
_SGLANG_FLAGS = {"model-path": "model", "context-length": "max-model-len",
                 "max-running-requests": "max-num-seqs", "tp-size": "tensor-parallel-size",
                 "tp": "tensor-parallel-size", "pp-size": "pipeline-parallel-size"}
_TRTLLM_FLAGS = {"max_seq_len": "max-model-len", "max_batch_size": "max-num-seqs",
                 "tp_size": "tensor-parallel-size", "pp_size": "pipeline-parallel-size"}


def parse_engine_args(argv: Sequence[str]) -> tuple[str, VllmArgs]:
    """The engine an argv starts and the flags the simulator reads, renamed to vLLM's."""
    engine = engine_of(argv)
    if engine == "vllm":
        return engine, parse_vllm_args(argv)
    tokens = _tokens(argv)
    renames = _SGLANG_FLAGS if engine == "sglang" else _TRTLLM_FLAGS
    renamed = []
    for token in tokens:
        name, eq, value = token[2:].partition("=") if token.startswith("--") else ("", "", "")
        renamed.append(f"--{renames[name]}{eq}{value}" if name in renames else token)
    if engine == "trtllm":  # `trtllm-serve MODEL ...`: the positional model, as vLLM's `serve MODEL`
        at = next(i for i, t in enumerate(renamed) if t.rsplit("/", 1)[-1] == "trtllm-serve")
        renamed = ["serve", *renamed[at + 1:]]
    args = parse_vllm_args(renamed)
    # Neither has vLLM's LoRA or KV-transfer flags under those names; admission refuses both.
    return engine, dataclasses.replace(args, enable_lora=False, lora_modules=(), kv_transfer_config=None)


def _engine_container(pod: Mapping[str, Any]) -> tuple[str, VllmArgs, dict[str, str]] | None:
    """(engine, arguments, literal env values) of the pod's engine container."""
    for container in pod.get("spec", {}).get("containers", []) or []:
        engine, args = parse_engine_args([*(container.get("command") or []), *(container.get("args") or [])])
        if args.model or args.served_model_names:
            env = {
                str(e["name"]): str(e["value"])
                for e in container.get("env") or []
                if isinstance(e, dict) and e.get("name") and e.get("value") is not None
            }
            return engine, args, env
    return None


def lora_config(args: VllmArgs, env: Mapping[str, str]) -> sim_config.LoraConfig | None:
    """The engine's LoRA set-up: None without --enable-lora (vLLM then has no LoRA at all)."""
    if not args.enable_lora:
        return None
    return sim_config.LoraConfig(
        max_rank=args.max_lora_rank or sim_config.DEFAULT_MAX_LORA_RANK,
        max_loras=args.max_loras or sim_config.DEFAULT_MAX_LORAS,
        max_cpu_loras=args.max_cpu_loras,
        modules=sim_config.parse_lora_modules(args.lora_modules),
        hub_endpoint=env.get("HF_ENDPOINT") or None,
        hub_offline=sim_config.env_flag(env.get("HF_HUB_OFFLINE")),
    )


def _positive(text: object, kind: type[int | float]) -> float | None:
    try:
        value = kind(str(text))
    except (TypeError, ValueError):
        return None
    return value if value > 0 else None


def gpu_product(pod: Mapping[str, Any]) -> str | None:
    """The GPU product a pod was placed for: its nodeSelector or required node affinity."""
    spec = pod.get("spec") or {}
    chosen = (spec.get("nodeSelector") or {}).get(GPU_PRODUCT_LABEL)
    if chosen:
        return str(chosen)
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    for term in required.get("nodeSelectorTerms") or []:
        for expression in term.get("matchExpressions") or []:
            values = expression.get("values") or []
            if expression.get("key") == GPU_PRODUCT_LABEL and expression.get("operator") == "In" and values:
                return str(values[0])
    return None


def base_latencies(pod: Mapping[str, Any], args: VllmArgs) -> tuple[float, float]:
    """(TTFT ms, ITL ms) from the measured table, times the pod's slowdown annotation."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    parameters = _positive(annotations.get(PARAMETERS_ANNOTATION), float)
    product = gpu_product(pod)
    found = None
    if parameters and product:
        found = measured.base_latencies(
            product, parameters, _WEIGHT_BYTES.get(args.quantization or "", 2.0),
            args.tensor_parallel_size or 1, args.pipeline_parallel_size or 1,
        )
    ttft, itl = found or (_DEFAULTS.ttft_ms, _DEFAULTS.itl_ms)
    slowdown = _positive(annotations.get(SLOWDOWN_ANNOTATION), float) or 1.0
    return ttft * slowdown, itl * slowdown


def pod_key(pod: Mapping[str, Any]) -> str:
    """namespace/name: the identity of a pod across IP changes."""
    meta = pod.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def claim_mounts(pod: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    """mountPath -> (namespace, claim) for the engine container's PersistentVolumeClaim volumes."""
    spec = pod.get("spec") or {}
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    claims = {v["name"]: v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes") or []
              if (v.get("persistentVolumeClaim") or {}).get("claimName")}
    out: dict[str, tuple[str, str]] = {}
    for container in spec.get("containers") or []:
        for mount in container.get("volumeMounts") or []:
            if mount.get("name") in claims:
                out[mount["mountPath"]] = (namespace, claims[mount["name"]])
    return out


def engine_config_from_pod(pod: Mapping[str, Any],
                           mounts: Mapping[str, str] | None = None) -> EngineConfig | None:
    """The engine a pod should have, or None when it should have none.

    None unless the pod carries the inference-deployment label, is the leader of its group
    (worker-index "0" or no such label), is Running and not terminating, has a podIP inside
    127.0.0.0/8 and runs a container whose `vllm serve` arguments name a model.
    """
    meta = pod.get("metadata") or {}
    labels = meta.get("labels") or {}
    status = pod.get("status") or {}
    if INFERENCE_LABEL not in labels or labels.get(WORKER_INDEX_LABEL, "0") != "0":
        return None
    if meta.get("deletionTimestamp") or status.get("phase") != "Running":
        return None
    try:
        ip = ipaddress.ip_address(status.get("podIP") or "")
    except ValueError:
        return None
    if ip not in _LOOPBACK:
        return None
    found = _engine_container(pod)
    if found is None:
        return None
    engine, args, env = found
    try:
        lora = lora_config(args, env)
        if lora is not None and mounts:
            lora = dataclasses.replace(lora, mounts=tuple(sorted(mounts.items())))
    except ValueError:
        return None  # vLLM would refuse these LoRA arguments and never start
    served = args.served_model_names or (args.model,)
    model = args.model or served[0]
    annotations = meta.get("annotations") or {}
    ttft, itl = base_latencies(pod, args)
    kv = handoff.kv_transfer_config(args.kv_transfer_config)
    concurrency = _positive(annotations.get(MAX_CONCURRENCY_ANNOTATION), int)
    return EngineConfig(
        host=str(ip),
        port=VLLM_PORT,
        model=str(model),
        served_model_names=tuple(str(name) for name in served),
        ttft_ms=ttft,
        itl_ms=itl,
        max_concurrency=int(concurrency or args.max_num_seqs or _DEFAULTS.max_concurrency),
        max_model_len=args.max_model_len or _DEFAULTS.max_model_len,
        tensor_parallel_size=args.tensor_parallel_size or _DEFAULTS.tensor_parallel_size,
        # Distinct per pod so that replicas do not answer with identical ids and lengths.
        seed=zlib.crc32((meta.get("uid") or pod_key(pod)).encode()),
        lora=lora,
        runtime_lora_updating=sim_config.env_flag(env.get("VLLM_ALLOW_RUNTIME_LORA_UPDATING")),
        role=handoff.role_of(kv, labels),
        kv_connector=str(kv.get("kv_connector")) if kv and kv.get("kv_connector") else None,
        engine=engine,
    )


def plan_fleet(
    running: Mapping[str, EngineConfig], desired: Mapping[str, EngineConfig]
) -> FleetChanges:
    """Stop engines that are gone or changed, start new or changed ones.

    Two pods can briefly claim one IP (KWOK reuses a deleted pod's address); the engine already
    bound there keeps it and the newcomer waits for a later pass, after the old pod's deletion
    stopped it.
    """
    stop = tuple(sorted(key for key, config in running.items() if desired.get(key) != config))
    bound = {(config.host, config.port) for key, config in running.items() if key not in stop}
    start = []
    for key in sorted(desired):
        config = desired[key]
        if running.get(key) == config or (config.host, config.port) in bound:
            continue
        bound.add((config.host, config.port))
        start.append(key)
    return FleetChanges(stop=stop, start=tuple(start))
