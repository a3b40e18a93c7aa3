"""What the planner is asked: an InferenceDeployment's spec, read and validated into plain data.

Reading the spec here, rather than through the API package's pydantic models, keeps the planner
usable from the offline CLI on any YAML and makes every bad field a `PlanInputError` naming the
field, which the CLI and the operator turn into a one-line message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from shardwise import pricing
from shardwise.api import bounds, extra_args, images, lora, model_ids
from shardwise.api import v1alpha1 as api
from shardwise.api import workload as workload_fit
from shardwise.planner import models, placement

OBJECTIVES = ("Latency", "Throughput", "Cost")

# Bytes per weight: bf16/fp16 2, fp8 1, AWQ/GPTQ int4 0.5 (GPU-FACTS.md, "Memory"). Scales, zero
# points and unquantized embeddings add a few percent, which the overhead term absorbs.
_DTYPE_BYTES = {"bfloat16": 2.0, "float16": 2.0, "fp8": 1.0}
_QUANTIZATION_BYTES = {"awq": 0.5, "gptq": 0.5}
_DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16"}
DTYPES = ("auto", *_DTYPE_BYTES)
# Checkpoints stored unquantized: --dtype (or auto) sets their width. Any other stored format is a
# quantization_config, which vLLM applies whatever --dtype says: the weights load as stored.
_UNQUANTIZED = {"bfloat16": 2.0, "float16": 2.0, "float32": 2.0}
# Bytes per weight of a quantized format when the checkpoint's own byte count is unknown (the
# catalog's entries): GPU-FACTS.md "Memory"; MXFP4 4 bits plus one 8-bit scale per 32 values.
_STORED_BYTES = {"fp8": 1.0, "fbgemm_fp8": 1.0, "awq": 0.5, "gptq": 0.5, "mxfp4": 0.5 + 1 / 32}
_FORMAT_WORDS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


@dataclass(frozen=True)
class Weights:
    """What vLLM will load, against what the spec asked: the plan counts `loaded`."""

    loaded: str  # "bfloat16", "fp8", "awq", "mxfp4", ...
    stored: str | None  # the checkpoint's own format; None when not known
    quantization_flag: str | None  # `--quantization`, only where it changes what is loaded
    ignored: str | None = None  # a sentence when spec.model.dtype/quantization is not honoured

    def to_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"format": self.loaded, "storedFormat": self.stored}
        if self.quantization_flag:
            body["quantization"] = self.quantization_flag
        if self.ignored:
            body["dtypeIgnored"] = self.ignored
        return body


def format_words(fmt: str) -> str:
    return _FORMAT_WORDS.get(fmt, fmt)


def weights_for(model_name: str, dtype: str, quantization: str | None,
                arch: models.ModelArch) -> Weights:
    """What vLLM loads for `dtype`/`quantization` asked of a checkpoint stored as
    `arch.stored_format`: a quantized checkpoint as stored (and what was asked, if different, is
    said); an unquantized one at the width asked, fp8 through vLLM's online quantization."""
    stored = arch.stored_format
    if stored is not None and stored not in _UNQUANTIZED:
        asked = quantization or dtype
        ignored = None
        if asked not in ("auto", stored) and not (asked == "fp8" and stored == "fbgemm_fp8"):
            field = "quantization" if quantization else "dtype"
            ignored = (f"spec.model.{field} {asked} is not what vLLM loads: the checkpoint of "
                       f"{model_name} is stored as {format_words(stored)} (its quantization_config), "
                       f"which vLLM loads as stored whatever --dtype says; planned as "
                       f"{format_words(stored)}. Set spec.model.dtype auto (or leave it unset) to "
                       "say so, or name an unquantized checkpoint")
        return Weights(loaded=stored, stored=stored, quantization_flag=None, ignored=ignored)
    if quantization:
        return Weights(loaded=quantization, stored=stored, quantization_flag=quantization)
    if dtype == "fp8":
        return Weights(loaded="fp8", stored=stored, quantization_flag="fp8")
    if dtype == "auto":
        return Weights(loaded=stored or "bfloat16", stored=stored, quantization_flag=None)
    return Weights(loaded=dtype, stored=stored, quantization_flag=None)

_DEFAULT_MAX_MODEL_LEN = 8192
_DEFAULT_MAX_CONCURRENCY = 16
_DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
_DEFAULT_PROMPT_TOKENS = 1024
_DEFAULT_OUTPUT_TOKENS = 256


class PlanInputError(ValueError):
    """A field of the request is missing or wrong; `field` is its dotted path in the spec."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class PlanRequest:
    """Everything the planner needs from a deployment, validated."""

    model_name: str
    arch: models.ModelArch
    dtype: str
    quantization: str | None
    max_model_len: int
    max_concurrency: int
    gpu_memory_utilization: float
    objective: str
    tensor: int | None
    pipeline: int | None
    gpu_products: tuple[str, ...] = ()
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[placement.Toleration, ...] = ()
    gpu_hour_usd: float | None = None
    prompt_tokens: int = _DEFAULT_PROMPT_TOKENS
    output_tokens: int = _DEFAULT_OUTPUT_TOKENS
    concurrency: int | None = None  # planned requests in flight; None = maxConcurrency
    request_rate: float | None = None  # planned requests/s; wins over concurrency
    lora_slots: int = 0  # spec.lora: GPU adapter slots (vLLM --max-loras); 0 = LoRA off
    lora_rank: int = 0  # and their rank (--max-lora-rank)
    engine: str = "vllm"  # spec.engine: its memory reading and fitted speed (planner/engines.py)
    disaggregated: bool = False  # spec.disaggregation mode Disaggregated (vLLM only, as LoRA)

    @property
    def weights(self) -> Weights:
        return weights_for(self.model_name, self.dtype, self.quantization, self.arch)

    @property
    def bytes_per_weight(self) -> float:
        loaded = self.weights
        if self.arch.weight_bytes and loaded.loaded == loaded.stored:
            # A quantized checkpoint read from its config.json: vLLM loads it as stored, whatever
            # the activation dtype, so its bytes on disk are its bytes in memory.
            return self.arch.weight_bytes / self.arch.parameters
        if loaded.loaded in _STORED_BYTES:
            return _STORED_BYTES[loaded.loaded]
        return _UNQUANTIZED.get(loaded.loaded, 2.0)

    @property
    def fp8_compute(self) -> bool:
        """FP8 weights, which Hopper and later multiply at FP8 rate (performance.py)."""
        return self.weights.loaded in ("fp8", "fbgemm_fp8")

    @property
    def weight_format(self) -> str:
        """What vLLM loads, in words for reasons: "bf16", "fp8", "awq int4", "mxfp4"."""
        loaded = self.weights.loaded
        if loaded in ("awq", "gptq"):
            return f"{loaded} int4"
        return format_words(loaded)


def _section(spec: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = spec.get(name) or {}
    if not isinstance(value, Mapping):
        raise PlanInputError(f"spec.{name}", "must be an object")
    return value


def _positive_int(
    value: Any, field: str, default: int | None, limits: bounds.Bounds = bounds.Bounds(1)
) -> int | None:
    """A whole number within the API's `limits` (the CRD's bounds for this field)."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise PlanInputError(field, f"must be a positive integer, got {value!r}")
    try:
        number = int(value)
    except ValueError:
        raise PlanInputError(field, f"must be a positive integer, got {value!r}") from None
    if number < 1:
        raise PlanInputError(field, f"must be a positive integer, got {value!r}")
    if not limits.contains(number):
        raise PlanInputError(field, f"must be in {limits}, got {value!r}")
    return number


def _arch_limits(key: str) -> bounds.Bounds:
    return bounds.of(api.Architecture, key)


_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def _parameter_count(value: Any, field: str) -> float:
    """Accept 70600000000, 7.06e10, "70.6B", "671b", "1.2T"."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        count = float(value)
    else:
        match = _COUNT.match(str(value))
        if not match:
            raise PlanInputError(field, f'must be a count such as 70.6e9 or "70.6B", got {value!r}')
        count = float(match.group(1)) * _SCALE[match.group(2).lower()]
    if not bounds.of(api.Architecture, "parameters").contains(count):
        raise PlanInputError(
            field, f"{value!r} is not a plausible parameter count "
            f"(between {api.MIN_PARAMETERS:.0e} and {api.MAX_PARAMETERS:.0e})"
        )
    return count


def _architecture(
    name: str, given: Mapping[str, Any], resolved: models.ModelArch | None = None
) -> models.ModelArch:
    """The catalog entry for `name` (or `resolved`, read from the model's config.json), `given`
    fields overriding it; all of it for unknown models."""
    field = "spec.model.architecture"
    # An explicit null is no value: the catalog's (or the missing-field error) applies.
    given = {key: value for key, value in given.items() if value is not None}
    base = resolved or models.lookup_model(name)
    if base is None:
        missing = [
            key
            for key in ("parameters", "layers", "hiddenSize", "attentionHeads")
            if key not in given
        ]
        if missing:
            raise PlanInputError(
                field,
                f"model {name!r} is not in the built-in catalog; set {', '.join(missing)}",
            )
    def whole(key: str, default: int | None) -> int:
        number = _positive_int(given.get(key), f"{field}.{key}", default, _arch_limits(key))
        if number is None:  # unreachable: the missing-field check above names it first
            raise PlanInputError(f"{field}.{key}", "is required")
        return number

    layers = whole("layers", base.layers if base else None)
    hidden = whole("hiddenSize", base.hidden_size if base else None)
    heads = whole("attentionHeads", base.attention_heads if base else None)
    kv_heads = whole("kvHeads", base.kv_heads if base else heads)
    if base is None and "headDim" not in given and hidden < heads:
        raise PlanInputError(
            f"{field}.headDim",
            f"hiddenSize {hidden} / attentionHeads {heads} leaves less than one dimension per head; "
            "set headDim, or check hiddenSize and attentionHeads",
        )
    head_dim = whole("headDim", base.head_dim if base else hidden // heads)
    if heads % kv_heads:
        raise PlanInputError(
            f"{field}.kvHeads", f"{kv_heads} does not divide attentionHeads {heads}"
        )
    parameters = (
        _parameter_count(given["parameters"], f"{field}.parameters")
        if "parameters" in given
        else base.parameters  # type: ignore[union-attr]
    )
    if "activeParameters" in given:
        active = _parameter_count(given["activeParameters"], f"{field}.activeParameters")
    elif base is not None and "parameters" not in given:
        active = base.active_parameters
    else:
        active = parameters
    if active > parameters:
        raise PlanInputError(f"{field}.activeParameters", "exceeds parameters")
    if resolved is not None and not given:
        return resolved
    config_facts: dict[str, Any] = {}
    if resolved is not None:
        # The config's sliding windows still hold when the spec overrides other numbers; its
        # weight bytes only while the spec leaves the parameter count alone.
        config_facts = {
            "sliding_window": resolved.sliding_window,
            "sliding_layers": resolved.sliding_layers,
            "context_length": resolved.context_length,
        }
        if "parameters" not in given:
            config_facts.update(
                weight_bytes=resolved.weight_bytes, quantization=resolved.quantization
            )
    return models.ModelArch(
        name=base.name if base else name,
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=head_dim,
        parameters=parameters,
        active_parameters=active,
        source=(
            base.source if base is not None and resolved is None and not given
            else "spec.model.architecture" + (f" over {resolved.source}" if resolved else "")
        ),
        # How the checkpoint is stored does not change with the shapes the spec overrides.
        stored_format=base.stored_format if base is not None else None,
        **_expert_facts(resolved or base, given),
        **config_facts,
    )


def _expert_facts(known: models.ModelArch | None, given: Mapping[str, Any]) -> dict[str, Any]:
    """Experts and MLA from the catalog or config.json: the spec's architecture has no word for
    them, so they hold unless it changes the layers or heads they hang on; the routed experts'
    parameter count only while the spec leaves the parameter counts alone (else derived)."""
    if known is None or {"layers", "attentionHeads", "kvHeads", "headDim"} & set(given):
        return {}
    counts_kept = not {"parameters", "activeParameters"} & set(given)
    return {
        "experts": known.experts,
        "experts_per_token": known.experts_per_token,
        "expert_parameters": known.expert_parameters if counts_kept else None,
        "latent_kv": known.latent_kv,
    }


def _lora(spec: Mapping[str, Any]) -> dict[str, int]:
    """spec.lora and the adapters' ranks: the LoRA slots vLLM holds on every GPU (api.lora.limits)."""
    if not spec.get("lora") and not spec.get("adapters"):
        return {}
    try:
        found = lora.limits_of(api.LoraSpec.model_validate(spec["lora"]) if spec.get("lora") is not None else None,
                               [api.AdapterSpec.model_validate(a) for a in spec.get("adapters") or []])
    except pydantic.ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise PlanInputError("spec.lora" if not spec.get("adapters") else "spec.adapters",
                             f"{where}: {error['msg']}") from None
    return {"lora_slots": found.max_loras, "lora_rank": found.max_rank} if found else {}


def _workload(spec: Mapping[str, Any]) -> dict[str, Any]:
    """spec.workload: the traffic the predictions are for (typical request shape and load)."""
    workload = _section(spec, "workload")
    field = "spec.workload.requestsPerSecond"
    rate = workload.get("requestsPerSecond")
    if rate is not None:
        limits = bounds.of(api.WorkloadSpec, "requestsPerSecond")
        if isinstance(rate, bool) or not isinstance(rate, (int, float, str)):
            raise PlanInputError(field, f"must be a positive number, got {rate!r}")
        try:
            number = float(rate)
        except ValueError:
            raise PlanInputError(field, f"must be a positive number, got {rate!r}") from None
        if not limits.contains(number):
            raise PlanInputError(field, f"must be in {limits}, got {rate!r}")
        rate = number

    def tokens(key: str, default: int | None) -> int | None:
        return _positive_int(
            workload.get(key), f"spec.workload.{key}", default, bounds.of(api.WorkloadSpec, key)
        )

    return {
        "prompt_tokens": tokens("promptTokens", _DEFAULT_PROMPT_TOKENS),
        "output_tokens": tokens("outputTokens", _DEFAULT_OUTPUT_TOKENS),
        "concurrency": tokens("concurrency", None),
        "request_rate": rate,
    }


def _tolerations(value: Any) -> tuple[placement.Toleration, ...]:
    field = "spec.placement.tolerations"
    if not isinstance(value, list):
        raise PlanInputError(field, "must be a list of tolerations")
    result = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise PlanInputError(f"{field}[{index}]", "must be an object")
        operator = str(item.get("operator") or "Equal")
        if operator not in ("Equal", "Exists"):
            raise PlanInputError(
                f"{field}[{index}].operator", f"must be Equal or Exists, got {operator!r}"
            )
        result.append(
            placement.Toleration(
                key=str(item.get("key") or ""),
                operator=operator,
                value=str(item.get("value") or ""),
                effect=str(item.get("effect") or ""),
            )
        )
    return tuple(result)


def check_strings(spec: Mapping[str, Any]) -> None:
    """The API's string rules (shardwise.api: model id, image reference, extraArgs), so an offline
    file is refused with the sentence the API server gives. The CLI runs this before it asks the
    hub for a model's config.json: a URL or a leading space must not become a hub lookup."""
    model, serving = _section(spec, "model"), _section(spec, "serving")
    name = model.get("name")
    if isinstance(name, str) and name.strip():
        problem = model_ids.problem(name)
        if problem:
            raise PlanInputError("spec.model.name", problem)
    image = serving.get("image")
    if image is not None:
        problem = images.problem(image) if isinstance(image, str) else "must be a string"
        if problem:
            raise PlanInputError("spec.serving.image", problem)
    items = serving.get("extraArgs") or []
    if not isinstance(items, list) or not all(isinstance(item, str) for item in items):
        raise PlanInputError("spec.serving.extraArgs", "must be a list of strings, one argument each")
    for index, item in enumerate(items):
        problem = extra_args.item_problem(item)
        if problem:
            raise PlanInputError(f"spec.serving.extraArgs[{index}]", problem)
    problem = extra_args.list_problem(items)
    if problem:
        raise PlanInputError("spec.serving.extraArgs", problem)


def request_from_spec(
    spec: Mapping[str, Any], *, architecture: models.ModelArch | None = None
) -> PlanRequest:
    """Read and validate an InferenceDeployment `.spec` (camelCase keys) into a PlanRequest.

    `architecture` is the model's, read from its config.json (hfconfig.resolve_architecture) when
    the catalog lacks it; fields of spec.model.architecture still override it."""
    if not isinstance(spec, Mapping):
        raise PlanInputError("spec", "must be an object")
    model = _section(spec, "model")
    serving = _section(spec, "serving")
    parallelism = _section(spec, "parallelism")
    placement_spec = _section(spec, "placement")
    pricing_spec = _section(spec, "pricing")

    name = model.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PlanInputError("spec.model.name", "is required (a Hugging Face repo id)")
    check_strings(spec)
    resolved = architecture
    architecture = model.get("architecture") or {}
    if not isinstance(architecture, Mapping):
        raise PlanInputError("spec.model.architecture", "must be an object")

    # auto, the default: the checkpoint's own format (weights_for).
    dtype = str(model.get("dtype") or "auto").lower()
    dtype = _DTYPE_ALIASES.get(dtype, dtype)
    if dtype not in DTYPES:
        raise PlanInputError("spec.model.dtype", f"must be auto, bfloat16, float16 or fp8, got {dtype!r}")
    quantization = model.get("quantization")
    if quantization is not None:
        quantization = str(quantization).lower()
        if quantization not in _QUANTIZATION_BYTES:
            raise PlanInputError(
                "spec.model.quantization", f"must be awq or gptq, got {quantization!r}"
            )

    utilization = serving.get("gpuMemoryUtilization")
    if utilization is None:
        utilization = _DEFAULT_GPU_MEMORY_UTILIZATION
    try:
        if isinstance(utilization, bool):
            raise TypeError
        utilization = float(utilization)
    except (TypeError, ValueError):
        raise PlanInputError(
            "spec.serving.gpuMemoryUtilization", f"must be a number, got {utilization!r}"
        ) from None
    utilization_limits = bounds.of(api.ServingSpec, "gpuMemoryUtilization")
    if not utilization_limits.contains(utilization):
        raise PlanInputError(
            "spec.serving.gpuMemoryUtilization", f"must be in {utilization_limits}, got {utilization}"
        )

    objective = str(parallelism.get("objective") or "Latency")
    if objective not in OBJECTIVES:
        raise PlanInputError(
            "spec.parallelism.objective",
            f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}",
        )

    products = placement_spec.get("gpuProducts") or []
    if not isinstance(products, list) or not all(isinstance(p, str) for p in products):
        raise PlanInputError("spec.placement.gpuProducts", "must be a list of GPU product strings")
    selector = placement_spec.get("nodeSelector") or {}
    if not isinstance(selector, Mapping):
        raise PlanInputError("spec.placement.nodeSelector", "must be a map of label to value")

    price = pricing_spec.get("gpuHourUSD")
    if price is not None:
        try:
            price = pricing.parse_price(price)
        except ValueError as error:
            raise PlanInputError("spec.pricing.gpuHourUSD", str(error)) from None

    max_model_len: int = _positive_int(  # type: ignore[assignment]  # never None: it has a default
        serving.get("maxModelLen"), "spec.serving.maxModelLen", _DEFAULT_MAX_MODEL_LEN,
        bounds.of(api.ServingSpec, "maxModelLen"),
    )
    workload = _workload(spec)
    # Predictions for requests the engine would refuse are for traffic that cannot happen.
    declared = {"promptTokens", "outputTokens"} & set(_section(spec, "workload"))
    too_long = workload_fit.context_problem(workload["prompt_tokens"], workload["output_tokens"], max_model_len)
    if declared and too_long is not None:
        raise PlanInputError("spec.workload", too_long.removeprefix("spec.workload: "))

    return PlanRequest(
        model_name=name.strip(),
        arch=_architecture(name, architecture, resolved),
        dtype=dtype,
        quantization=quantization,
        max_model_len=max_model_len,
        max_concurrency=_positive_int(
            serving.get("maxConcurrency"), "spec.serving.maxConcurrency", _DEFAULT_MAX_CONCURRENCY,
            bounds.of(api.ServingSpec, "maxConcurrency"),
        ),  # type: ignore[arg-type]
        gpu_memory_utilization=utilization,
        objective=objective,
        tensor=_positive_int(parallelism.get("tensor"), "spec.parallelism.tensor", None,
                             bounds.of(api.ParallelismSpec, "tensor")),
        pipeline=_positive_int(parallelism.get("pipeline"), "spec.parallelism.pipeline", None,
                               bounds.of(api.ParallelismSpec, "pipeline")),
        gpu_products=tuple(products),
        node_selector=tuple(sorted((str(k), str(v)) for k, v in selector.items())),
        tolerations=_tolerations(placement_spec.get("tolerations") or []),
        gpu_hour_usd=price,
        **workload,
        **_lora(spec),
        **_engine(spec),
    )


def _engine(spec: Mapping[str, Any]) -> dict[str, Any]:
    engine = str(spec.get("engine") or "vllm")
    if engine not in ("vllm", "sglang", "trtllm"):
        raise PlanInputError("spec.engine", f"must be vllm, sglang or trtllm, got {engine!r}")
    mode = (_section(spec, "disaggregation").get("mode") or "")
    return {"engine": engine, "disaggregated": mode == "Disaggregated"}
