"""The InferenceDeployment API, v1alpha1: the single source of truth for the CRD schema.

Every field carries a description (it becomes `kubectl explain` text), a default where one makes
sense, and bounds. Cross-field rules are CEL (`x-kubernetes-validations`) so the API server
rejects bad specs with a sentence a person understands, before shardwise ever sees them.
`shardwise.api.crd` turns these models into the CRD YAML in crds/.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, model_validator

from shardwise.api import checks, engines, extra_args, images, model_ids
from shardwise.api import workload as workload_fit
from shardwise.api.names import MAX_REPLICAS

GROUP = "shardwise.io"
VERSION = "v1alpha1"
KIND = "InferenceDeployment"
PLURAL = "inferencedeployments"
SINGULAR = "inferencedeployment"
SHORT_NAMES = ["infd"]
CATEGORIES = ["shardwise"]

DEFAULT_IMAGE = "vllm/vllm-openai:v0.32.0"
DURATION_PATTERN = r"^[0-9]+(\.[0-9]+)?(ms|s|m)$"
# Prices below 10^4 USD per GPU-hour (pricing.MAX_GPU_HOUR_USD reads the same digit count).
GPU_HOUR_USD_INTEGER_DIGITS = 4
USD_PATTERN = rf"^[0-9]{{1,{GPU_HOUR_USD_INTEGER_DIGITS}}}(\.[0-9]{{1,4}})?$"
# vLLM's --gpu-memory-utilization; the planner checks the same bounds (shardwise.api.bounds).
GPU_MEMORY_UTILIZATION_MIN = 0.05
GPU_MEMORY_UTILIZATION_MAX = 0.99
# A million parameters is no language model; a quadrillion is a thousand times the largest today.
MIN_PARAMETERS = 1_000_000
MAX_PARAMETERS = 10**15


def _rules(*rules: tuple[str, ...]) -> dict[str, Any]:
    """CEL rules with the message the API server returns when one fails (and, as a third item, the
    field the error names, when it is one field of the object)."""
    return {"x-kubernetes-validations": [
        {"rule": r[0], "message": r[1], **({"fieldPath": r[2]} if len(r) > 2 else {})} for r in rules
    ]}


# An empty object as the schema default makes the API server apply the nested defaults too.
_EMPTY: dict[str, Any] = {"json_schema_extra": {"default": {}}}


class _Model(BaseModel):
    # Unknown fields are dropped by the API server's structural pruning before we see an
    # object, so ignoring them here only matters for offline files (`shardwise plan -f`).
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class DType(str, Enum):
    auto = "auto"
    bfloat16 = "bfloat16"
    float16 = "float16"
    fp8 = "fp8"


class Quantization(str, Enum):
    awq = "awq"
    gptq = "gptq"


class Objective(str, Enum):
    Latency = "Latency"
    Throughput = "Throughput"
    Cost = "Cost"


class WhenNoRoom(str, Enum):
    ReplaceInPlace = "ReplaceInPlace"
    Wait = "Wait"


class Architecture(_Model):
    """Shape of a model the built-in catalog does not know, or overrides for one it does."""

    parameters: int | None = Field(
        None, ge=MIN_PARAMETERS, le=MAX_PARAMETERS, description="Total parameter count, e.g. 70553706496."
    )
    activeParameters: int | None = Field(
        None, ge=MIN_PARAMETERS, le=MAX_PARAMETERS,
        description="Parameters active per token (mixture-of-experts); defaults to parameters.",
    )
    layers: int | None = Field(None, ge=1, le=1024, description="Number of transformer layers (num_hidden_layers).")
    hiddenSize: int | None = Field(None, ge=1, le=131_072, description="Hidden size (hidden_size).")
    attentionHeads: int | None = Field(None, ge=1, le=1024, description="Attention heads (num_attention_heads).")
    kvHeads: int | None = Field(None, ge=1, le=1024, description="Key/value heads (num_key_value_heads).")
    headDim: int | None = Field(None, ge=1, le=4096, description="Dimension of one attention head (head_dim).")


class SecretKeyRef(_Model):
    name: str = Field(..., min_length=1, max_length=253, description="Name of a Secret in the same namespace.")
    key: str = Field("token", min_length=1, description="Key inside the Secret.")


class CacheMode(str, Enum):
    Cluster = "Cluster"
    PVC = "PVC"
    None_ = "None"


class ModelCacheSpec(_Model):
    """Where the weights come from: a shared cache volume filled once, a volume you filled, or the hub."""

    mode: CacheMode | None = Field(
        None,
        description="Cluster: a cache PersistentVolumeClaim filled once by a downloader Job and shared by every "
        "InferenceDeployment of the same model and revision in the namespace. PVC: weights you put on an existing "
        "claim (claimName, path). None: each serving pod downloads from the hub itself. Unset: the operator's "
        "default (Cluster unless configured otherwise).",
    )
    storageClassName: str | None = Field(
        None, max_length=253, description="Storage class of the cache claim (mode Cluster); unset: the cluster default."
    )
    accessMode: str = Field(
        "ReadWriteMany", pattern=r"^(ReadWriteMany|ReadOnlyMany|ReadWriteOnce)$",
        description="Access mode of the cache claim: ReadWriteMany where the storage offers it (the Job writes, "
        "every serving pod reads); ReadWriteOnce only works when all pods share one node.",
    )
    size: str | None = Field(
        None, pattern=r"^[0-9]+(Ki|Mi|Gi|Ti)$",
        description="Size of the cache claim; default: the model's weight bytes plus 15 % and 1 GiB of margin.",
    )
    claimName: str | None = Field(None, max_length=253, description="mode PVC: the claim that holds the weights.")
    path: str = Field("", max_length=1024, description="mode PVC: folder inside the claim that holds the model files.")
    hubEndpoint: str | None = Field(
        None, max_length=1024, description="Hugging Face hub (or mirror) URL; default: the operator's setting, "
        "else https://huggingface.co.",
    )
    keep: bool = Field(
        False, description="Keep the cache claim when no InferenceDeployment uses it any more (else it is "
        "removed after the operator's grace period).",
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            ("!has(self.mode) || self.mode != 'PVC' || has(self.claimName)",
             "model.cache.mode PVC needs model.cache.claimName (the claim that holds the weights)"),
        )
    )


def _checked(rules: tuple[checks.Check, ...]) -> dict[str, Any]:
    """Field arguments for a string checked by `rules` both at admission (CEL) and in pydantic."""
    return {"json_schema_extra": {"x-kubernetes-validations": checks.cel_rules(rules)}}


class ModelSpec(_Model):
    name: Annotated[str, AfterValidator(checks.validator(model_ids.CHECKS))] = Field(
        ...,
        min_length=1,
        max_length=512,
        description="What vLLM loads: a Hugging Face repository id namespace/name (e.g. "
        "meta-llama/Llama-3.1-70B-Instruct) or an absolute path inside the container (weights already in the "
        "image or on a volume).",
        **_checked(model_ids.CHECKS),
    )
    servedName: str | None = Field(
        None,
        max_length=253,
        description="The `model` name clients send to the OpenAI-compatible API; defaults to the resource name.",
    )
    dtype: DType = Field(
        DType.auto,
        description="Weight precision. auto (the default): as the checkpoint stores them (its "
        "quantization_config, e.g. DeepSeek-V3's fp8 or gpt-oss's mxfp4, else its torch_dtype). bfloat16 "
        "or float16: 16-bit, for an unquantized checkpoint. fp8: an unquantized checkpoint quantized to FP8 "
        "as vLLM loads it. vLLM loads a pre-quantized checkpoint as stored whatever this says; the plan "
        "counts what it loads and the DtypeIgnored condition says when the two differ.",
    )
    quantization: Quantization | None = Field(None, description="Pre-quantized int4 weights: awq or gptq.")
    architecture: Architecture | None = Field(
        None, description="Model shape for models the built-in catalog does not know (or overrides)."
    )
    hfTokenSecretRef: SecretKeyRef | None = Field(
        None, description="Secret holding a Hugging Face token for gated models (exposed as HF_TOKEN; with a "
        "cache only to the downloader)."
    )
    revision: str | None = Field(
        None, max_length=255, description="Hub revision (branch, tag or commit); default main. The commit it "
        "resolved to is pinned on status.modelCache: a new upstream commit changes nothing until this field does.",
    )
    cache: ModelCacheSpec = Field(default_factory=ModelCacheSpec, description="Model weight cache.", **_EMPTY)

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.quantization) || self.dtype != 'fp8'",
                "model.quantization (awq/gptq int4) cannot be combined with dtype fp8; use one or the other",
            ),
        )
    )


# One `vllm serve` argument; what it may be is shardwise.api.extra_args (CEL on each item, and the
# whole list checked by the model: a value needs the flag before it).
ExtraArg = Annotated[str, StringConstraints(min_length=1, max_length=1024),
                     AfterValidator(checks.validator(extra_args.ITEM_CHECKS)),
                     Field(json_schema_extra={"x-kubernetes-validations": checks.cel_rules(extra_args.ITEM_CHECKS)})]


def _extra_args_list(items: list[str]) -> list[str]:
    problem = extra_args.list_problem(items)
    if problem is not None:
        raise ValueError(problem)
    return items


def _engine_arg(args: engines.EngineArgs) -> Any:
    """One argument of another engine's command line (shardwise.api.engines): CEL on each item."""
    return Annotated[str, StringConstraints(min_length=1, max_length=1024),
                     AfterValidator(checks.validator(args.item_checks)),
                     Field(json_schema_extra={"x-kubernetes-validations": checks.cel_rules(args.item_checks)})]


def _engine_args_list(args: engines.EngineArgs) -> Any:
    def check(items: list[str]) -> list[str]:
        problem = args.list_problem(items)
        if problem is not None:
            raise ValueError(problem)
        return items
    return AfterValidator(check)


SGLangArg = _engine_arg(engines.SGLANG)
TRTLLMArg = _engine_arg(engines.TRTLLM)


class ServingSpec(_Model):
    maxModelLen: int = Field(
        8192, ge=1, le=10_485_760, description="Longest context (prompt + output tokens) one request may use."
    )
    maxConcurrency: int = Field(
        16, ge=1, le=4096, description="Requests served at once per replica (vLLM --max-num-seqs); sizes the KV cache."
    )
    gpuMemoryUtilization: float = Field(
        # The planner reads these bounds too (shardwise.api.bounds): below 5% no model's weights fit.
        0.9, ge=GPU_MEMORY_UTILIZATION_MIN, le=GPU_MEMORY_UTILIZATION_MAX,
        description="Fraction of each GPU's memory vLLM may use (--gpu-memory-utilization)."
    )
    image: Annotated[str, AfterValidator(checks.validator(images.SERVING_IMAGE))] = Field(
        DEFAULT_IMAGE, min_length=1, max_length=512, description="Container image running `vllm serve` "
        "([registry[:port]/]name[:tag][@sha256:digest]).", **_checked(images.SERVING_IMAGE),
    )
    extraArgs: Annotated[list[ExtraArg], AfterValidator(_extra_args_list)] = Field(
        default_factory=list,
        max_length=128,
        description="Extra `vllm serve` arguments of vLLM 0.32, one list item per token (no shell): `--flag`, "
        "`--flag=value`, or a value right after the flag it belongs to. Flags shardwise sets from the spec or "
        "the plan (model, dtype, quantization, host, port, parallel sizes, data parallelism, multi-node "
        "flags, context length, memory fraction, served name, max sequences, LoRA) may not appear here in any "
        "spelling.",
    )
    sglangExtraArgs: Annotated[list[SGLangArg], _engine_args_list(engines.SGLANG)] = Field(  # type: ignore[valid-type]
        default_factory=list,
        max_length=128,
        description="Extra `python -m sglang.launch_server` arguments of SGLang 0.5.23 (spec.engine sglang), one "
        "list item per token (no shell). Flags shardwise sets (model, host, port, served name, parallel sizes, "
        "multi-node flags, memory fraction, context length, running requests, dtype, quantization, metrics, LoRA "
        "and disaggregation flags) may not appear here in any spelling.",
    )
    trtllmExtraArgs: Annotated[list[TRTLLMArg], _engine_args_list(engines.TRTLLM)] = Field(  # type: ignore[valid-type]
        default_factory=list,
        max_length=128,
        description="Extra `trtllm-serve` arguments of TensorRT-LLM (spec.engine trtllm), one list item per token "
        "(no shell), spelled as its click options are (`--flag_name`). Flags shardwise sets (host, port, parallel "
        "sizes, batch and token limits, KV memory fraction, the LLM API options file, backend) may not appear here.",
    )
    modelLoadMiBps: int | None = Field(
        None,
        ge=1,
        le=1_000_000,
        description="Rate (MiB/s) at which a serving pod is assumed to download and load the weights; sizes "
        "the startup probe so a large model is not restarted while loading (default 250; raise it for a "
        "local model cache).",
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                # The schema's minimum alone lets a whole number through: the API server compares an
                # integer value (0) with the minimum truncated to an integer (0). CEL compares doubles.
                f"!has(self.gpuMemoryUtilization) || self.gpuMemoryUtilization >= {GPU_MEMORY_UTILIZATION_MIN}",
                f"serving.gpuMemoryUtilization must be in [{GPU_MEMORY_UTILIZATION_MIN}, "
                f"{GPU_MEMORY_UTILIZATION_MAX}]: below {GPU_MEMORY_UTILIZATION_MIN:.0%} of a GPU no model fits",
                ".gpuMemoryUtilization",
            ),
        )
    )


class ParallelismSpec(_Model):
    objective: Objective = Field(
        Objective.Latency,
        description="What the planner optimises: Latency (lowest inter-token latency), Throughput "
        "(most tokens/s per GPU) or Cost (fewest GPUs).",
    )
    tensor: int | None = Field(None, ge=1, le=512, description="Tensor-parallel degree set by hand (with pipeline).")
    pipeline: int | None = Field(None, ge=1, le=512, description="Pipeline-parallel degree set by hand (with tensor).")

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "has(self.tensor) == has(self.pipeline)",
                "parallelism.tensor and parallelism.pipeline must be set together (or both left to the planner)",
            ),
        )
    )


# What the core API's ValidateTolerations accepts (a qualified name; a label value), so a bad
# toleration is refused here rather than on the Deployment the operator creates from it.
QUALIFIED_NAME = (r"^(([a-z0-9]([-a-z0-9]*[a-z0-9])?)(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                  r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$"


class Toleration(_Model):
    key: str | None = Field(None, max_length=317, pattern=QUALIFIED_NAME,
                            description="Taint key the toleration applies to; empty matches all keys.")
    operator: str | None = Field(None, pattern=r"^(Exists|Equal)$", description="Exists or Equal (default Equal).")
    value: str | None = Field(None, max_length=63, pattern=LABEL_VALUE,
                              description="Taint value to match when operator is Equal.")
    effect: str | None = Field(
        None, pattern=r"^(NoSchedule|PreferNoSchedule|NoExecute)?$", description="Taint effect to match; empty matches all."
    )
    tolerationSeconds: int | None = Field(None, description="How long a NoExecute taint is tolerated.")

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
                "a toleration without a key must use operator Exists (it then matches every taint)",
            ),
            (
                "!(has(self.operator) && self.operator == 'Exists') || !has(self.value) || self.value == ''",
                "a toleration with operator Exists must not have a value",
            ),
            (
                "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
                "tolerationSeconds applies only to effect NoExecute",
            ),
        )
    )


class PlacementSpec(_Model):
    gpuProducts: list[str] = Field(
        default_factory=list,
        description="Allowed GPU products as GPU Feature Discovery reports them (nvidia.com/gpu.product), "
        "e.g. NVIDIA-H100-80GB-HBM3. Empty allows any.",
    )
    nodeSelector: dict[str, str] = Field(default_factory=dict, description="Node labels the serving pods require.")
    tolerations: list[Toleration] = Field(default_factory=list, description="Tolerations for the serving pods.")


class SLOSpec(_Model):
    ttftP95: str | None = Field(None, pattern=DURATION_PATTERN, description="Time-to-first-token p95 target, e.g. 500ms.")
    itlP95: str | None = Field(None, pattern=DURATION_PATTERN, description="Inter-token latency p95 target, e.g. 50ms.")
    e2eP95: str | None = Field(None, pattern=DURATION_PATTERN, description="End-to-end request p95 target, e.g. 20s.")

    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "has(self.ttftP95) || has(self.itlP95) || has(self.e2eP95)",
                "autoscaling.slo needs at least one target: ttftP95, itlP95 or e2eP95",
            ),
            *(
                (f"!has(self.{target}) || !self.{target}.matches('^0+(\\\\.0+)?(ms|s|m)$')",
                 f"autoscaling.slo.{target} must be above zero (no latency can meet a target of 0)")
                for target in ("ttftP95", "itlP95", "e2eP95")
            ),
        )
    )


class ScalingBehaviourSpec(_Model):
    """spec.autoscaling without its SLO: a disaggregated role's autoscaling, whose SLO is the role's own
    (disaggregation.prefill.slo, decode.slo)."""

    minReplicas: int = Field(1, ge=0, le=MAX_REPLICAS, description="Fewest replicas; 0 needs allowScaleToZero.")
    maxReplicas: int = Field(..., ge=1, le=MAX_REPLICAS, description="Most replicas shardwise may run.")
    allowScaleToZero: bool = Field(
        False, description="Allow minReplicas 0; the first request after idling waits for a cold start (minutes)."
    )
    scaleToZeroAfterSeconds: int = Field(
        300, ge=0, le=86400,
        description="With minReplicas 0: how long a deployment must see no request before it goes to zero.",
    )
    tolerance: float = Field(0.1, ge=0.0, le=0.9, description="No scaling while every SLO ratio is within 1 +/- tolerance.")
    evaluationPeriodSeconds: int = Field(30, ge=1, le=3600, description="How often a scaling decision is made.")
    scaleUpStabilizationSeconds: int = Field(0, ge=0, le=3600, description="Window over which scale-up takes the lowest recommendation.")
    scaleDownStabilizationSeconds: int = Field(
        300, ge=0, le=86400, description="Sustained headroom needed before scaling down."
    )
    maxScaleUpStep: int = Field(4, ge=1, le=1000, description="Most replicas one decision may add.")
    maxScaleDownStep: int = Field(1, ge=1, le=1000, description="Most replicas one decision may remove.")
    targetUtilization: float = Field(
        0.7, gt=0.0, le=1.0,
        description="Fraction of the SLO (or of the KV cache) a scale-down aims for, so that the smaller count "
        "does not breach at once; at most 1 - tolerance.",
    )
    maxWaitingPerReplica: float = Field(
        8.0, gt=0.0, le=100_000.0,
        description="Queued requests per ready replica that count as pressure even before latency shows it.",
    )

    model_config = ConfigDict(
        json_schema_extra=_rules(
            ("self.minReplicas <= self.maxReplicas", "autoscaling.minReplicas must not exceed autoscaling.maxReplicas"),
            (
                "self.targetUtilization <= 1.0 - self.tolerance",
                "autoscaling.targetUtilization must be at most 1 - autoscaling.tolerance, or a scale-down would "
                "land inside the tolerance band and scale back up",
            ),
            (
                "self.minReplicas > 0 || self.allowScaleToZero",
                "autoscaling.minReplicas 0 needs autoscaling.allowScaleToZero: true (the first request will wait "
                "for a cold start)",
            ),
        )
    )


class AutoscalingSpec(ScalingBehaviourSpec):
    slo: SLOSpec = Field(..., description="Latency targets shardwise keeps the observed p95s under.")


class PricingSpec(_Model):
    gpuHourUSD: str | None = Field(
        None, pattern=USD_PATTERN, description="Price of one GPU-hour in US dollars, e.g. \"2.49\"; else the cluster table."
    )


def _no_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class WorkloadSpec(_Model):
    """The traffic the planner's predictions are for: typical request shape and expected load."""

    # No defaults in the CRD (the model's apply when unset), so its CEL rule can tell a declared
    # workload from the defaults: only a declared one must fit serving.maxModelLen (api.workload).
    promptTokens: int = Field(
        workload_fit.DEFAULT_PROMPT_TOKENS, ge=1, le=10_485_760, json_schema_extra=_no_default,
        description=f"Typical prompt length in tokens (default {workload_fit.DEFAULT_PROMPT_TOKENS}); sets "
        "prefill cost (TTFT) and KV use. With outputTokens, at most serving.maxModelLen.",
    )
    outputTokens: int = Field(
        workload_fit.DEFAULT_OUTPUT_TOKENS, ge=1, le=10_485_760, json_schema_extra=_no_default,
        description=f"Typical output length in tokens (default {workload_fit.DEFAULT_OUTPUT_TOKENS}); with "
        "promptTokens sizes the KV cache.",
    )
    concurrency: int | None = Field(
        None, ge=1, le=100_000,
        description="Expected requests in flight per replica; defaults to serving.maxConcurrency (a full batch).",
    )
    requestsPerSecond: float | None = Field(
        None, gt=0.0, le=1_000_000.0,
        description="Expected request rate per replica (open loop); when set, predictions use it instead of "
        "concurrency, including queueing.",
    )


class RolloutSpec(_Model):
    whenNoRoom: WhenNoRoom = Field(
        WhenNoRoom.ReplaceInPlace,
        description="What a rollout (a new image, vLLM flag or serving setting) does when the GPUs for one "
        "extra replica are not free. With room it always surges: the new replica starts beside the old ones. "
        "Without, several replicas are replaced one at a time (the others keep serving). A single replica is "
        "replaced in place with ReplaceInPlace (a short outage while the new one loads), or with Wait keeps "
        "serving while the rollout waits for one replica's GPUs to be free. The choice is made when a rollout "
        "starts and kept until it ends; status.rollout says which and why.",
    )


class FailureMode(str, Enum):
    FailOpen = "FailOpen"
    FailClose = "FailClose"


class EndpointPickerSpec(_Model):
    name: str = Field(
        ..., min_length=1, max_length=63, pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
        description="Service (in this namespace) of the endpoint picker the gateway asks which pod serves a "
        "request: shardwise's picker, or an llm-d / Gateway API Inference Extension EPP.",
    )
    port: int = Field(9002, ge=1, le=65535, description="The picker Service's port (its ext_proc gRPC port).")
    failureMode: FailureMode = Field(
        FailureMode.FailClose,
        description="When the picker does not answer: FailClose drops the request, FailOpen lets the gateway "
        "pick a pod of the pool itself.",
    )


class InferencePoolRouting(_Model):
    enabled: bool = Field(True, description="Own an InferencePool (inference.networking.k8s.io/v1) named after "
                          "this resource, selecting exactly its serving pods.")
    endpointPicker: EndpointPickerSpec = Field(..., description="The pool's endpointPickerRef.")


class GatewayRef(_Model):
    name: str = Field(..., min_length=1, max_length=253, description="Name of the Gateway.")
    namespace: str | None = Field(
        None, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$",
        description="Namespace of the Gateway (default: this resource's; another needs the Gateway's "
        "allowedRoutes to admit this namespace).",
    )
    sectionName: str | None = Field(None, max_length=253, description="The Gateway listener to attach to.")


class HTTPRouteRouting(_Model):
    gatewayRef: GatewayRef = Field(..., description="The Gateway the HTTPRoute is parented to.")


class RoutingSpec(_Model):
    inferencePool: InferencePoolRouting | None = Field(
        None, description="An InferencePool for a Gateway API Inference Extension gateway.")
    httpRoute: HTTPRouteRouting | None = Field(
        None, description="Also own an HTTPRoute (gateway.networking.k8s.io/v1) sending requests whose "
        "X-Gateway-Base-Model-Name header is the served model name to the pool; needs inferencePool.",
    )

    model_config = ConfigDict(json_schema_extra=_rules(
        ("!has(self.httpRoute) || (has(self.inferencePool) && self.inferencePool.enabled)",
         "routing.httpRoute sends requests to the InferencePool: it needs routing.inferencePool enabled"),
    ))

    @model_validator(mode="after")
    def _route_needs_pool(self) -> RoutingSpec:
        if self.httpRoute is not None and not (self.inferencePool is not None and self.inferencePool.enabled):
            raise ValueError("routing.httpRoute sends requests to the InferencePool: it needs "
                             "routing.inferencePool enabled")
        return self


# vLLM 0.32's --max-lora-rank choices (vllm/config/lora.py MaxLoRARanks).
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
DEFAULT_MAX_LORA_RANK = 16  # vLLM's default
DEFAULT_MAX_LORAS = 4  # vLLM's default is 1: one adapter per batch serialises a deployment of many
MAX_ADAPTERS = 64
ADAPTER_NAME = r"^[A-Za-z0-9](?:[A-Za-z0-9._/-]{0,251}[A-Za-z0-9])?$"
ADAPTER_REPO = rf"^{model_ids.REPO_PART}/{model_ids.REPO_PART}$"
CLAIM_PATH = r"^[A-Za-z0-9_.-]+(?:/[A-Za-z0-9_.-]+)*/?$"


class AdapterSource(_Model):
    """Where a LoRA adapter's files are: a hub repository, or a folder in the model's cache claim."""

    repo: str | None = Field(
        None, max_length=193, pattern=ADAPTER_REPO, description="Hugging Face repository of the adapter "
        "(namespace/name); downloaded once into the model's cache claim and verified before any engine loads it.",
    )
    revision: str | None = Field(
        None, max_length=255, description="Hub revision of the adapter (branch, tag or commit); default main. The "
        "commit it resolved to is shown on status.adapters.",
    )
    path: str | None = Field(
        None, max_length=1024, pattern=CLAIM_PATH, description="A folder inside the model's cache claim (mode PVC "
        "or Cluster) holding adapter_config.json and adapter_model.safetensors.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> AdapterSource:  # the CEL rules below, for files read offline
        if (self.repo is None) == (self.path is None):
            raise ValueError("an adapter source is either repo (the hub) or path (a folder in the model's cache "
                             "claim), exactly one of them")
        if self.revision is not None and self.repo is None:
            raise ValueError("source.revision is a hub revision: it needs source.repo")
        if self.path is not None and ".." in self.path.split("/"):
            raise ValueError("source.path is a folder inside the claim: '..' may not appear in it")
        if self.repo is not None and ("--" in self.repo or ".." in self.repo):
            raise ValueError("source.repo may not contain '--' or '..': the hub refuses such repo ids")
        return self

    model_config = ConfigDict(json_schema_extra=_rules(
        ("has(self.repo) != has(self.path)", "an adapter source is either repo (the hub) or path (a folder in the "
         "model's cache claim), exactly one of them"),
        ("!has(self.revision) || has(self.repo)", "source.revision is a hub revision: it needs source.repo"),
        ("!has(self.path) || !self.path.split('/').exists(p, p == '..')",
         "source.path is a folder inside the claim: '..' may not appear in it", ".path"),
        ("!has(self.repo) || !self.repo.matches('--|[.][.]')",
         "source.repo may not contain '--' or '..': the hub refuses such repo ids", ".repo"),
    ))


class AdapterSpec(_Model):
    name: str = Field(
        ..., min_length=1, max_length=253, pattern=ADAPTER_NAME,
        description="The `model` name clients send to reach this adapter (on the Service and the gateway).",
    )
    source: AdapterSource = Field(..., description="Where the adapter's files are.")
    rank: int | None = Field(
        None, ge=1, le=LORA_RANKS[-1], description="The adapter's LoRA rank (r in its adapter_config.json), when "
        "known: sizes --max-lora-rank and the planner's LoRA memory when lora.maxLoraRank is unset.",
    )


class LoraSpec(_Model):
    """How the engines hold LoRA adapters. Fixed at engine start: a change here restarts the pods (a
    rollout); adding or removing an adapter within these limits does not."""

    maxLoraRank: Literal[LORA_RANKS] | None = Field(  # type: ignore[valid-type]
        None, description="Largest adapter rank the engines accept (vLLM --max-lora-rank: one of "
        f"{', '.join(map(str, LORA_RANKS))}); default: the smallest that fits every adapter's rank, at least "
        f"{DEFAULT_MAX_LORA_RANK}. An adapter above it is refused (RankAboveLimit) and nothing else is disturbed.",
    )
    maxLoras: int = Field(
        DEFAULT_MAX_LORAS, ge=1, le=MAX_ADAPTERS, description="Adapters one batch may mix on a GPU (vLLM "
        "--max-loras); each slot holds GPU memory for an adapter of maxLoraRank.",
    )
    maxCpuLoras: int | None = Field(
        None, ge=1, le=1024, description="Adapters kept in CPU memory, ready to swap in (vLLM --max-cpu-loras; "
        "default maxLoras, at least as many as the adapters)."
    )

    model_config = ConfigDict(json_schema_extra=_rules(
        ("!has(self.maxCpuLoras) || self.maxCpuLoras >= self.maxLoras",
         "lora.maxCpuLoras must be at least lora.maxLoras (vLLM refuses to start otherwise)", ".maxCpuLoras"),
    ))


class DisaggregationMode(str, Enum):
    # Not On/Off: YAML 1.1 (kubectl, yaml.v2) reads a bare On or Off as a boolean.
    Aggregated = "Aggregated"
    Disaggregated = "Disaggregated"


class KVConnector(str, Enum):
    # vLLM 0.32's KVConnectorFactory names (vllm/distributed/kv_transfer/kv_connector/factory.py).
    Auto = "Auto"
    NixlConnector = "NixlConnector"
    LMCacheConnectorV1 = "LMCacheConnectorV1"
    ExampleConnector = "ExampleConnector"
    OffloadingConnector = "OffloadingConnector"


DISAGGREGATION_OFFLOADING_MESSAGE = (
    "spec.disaggregation.connector OffloadingConnector offloads KV to memory inside one engine: it cannot hand "
    "a prefill engine's KV to a decode engine; use NixlConnector (GPUs), LMCacheConnectorV1 or ExampleConnector"
)
DISAGGREGATION_STORAGE_MESSAGE = (
    "spec.disaggregation.connector ExampleConnector hands KV over as files: it needs "
    "disaggregation.sharedStorage.claimName, a ReadWriteMany claim both roles mount"
)
DISAGGREGATION_ADAPTERS_MESSAGE = (
    "spec.disaggregation.connector ExampleConnector keys the KV it saves by prompt tokens only, so a request for "
    "one LoRA adapter could load KV another adapter computed: use NixlConnector or LMCacheConnectorV1 with adapters"
)
DISAGGREGATION_AUTOSCALING_MESSAGE = (
    "spec.autoscaling does not apply to a disaggregated deployment: each role scales on its own SLO; set "
    "disaggregation.prefill.autoscaling (with prefill.slo.ttftP95) and/or disaggregation.decode.autoscaling "
    "(with decode.slo.itlP95)"
)
DISAGGREGATION_PREFILL_SLO_MESSAGE = (
    "spec.disaggregation.prefill.autoscaling needs prefill.slo.ttftP95: the prefill role scales on its time to "
    "first token"
)
DISAGGREGATION_DECODE_SLO_MESSAGE = (
    "spec.disaggregation.decode.autoscaling needs decode.slo.itlP95: the decode role scales on its inter-token "
    "latency"
)
DISAGGREGATION_PAIR_ZERO_MESSAGE = (
    "spec.disaggregation: scale to zero applies to the pair: set autoscaling.minReplicas 0 on both roles or on "
    "neither"
)
DISAGGREGATION_DECODE_MESSAGE = (
    "spec.disaggregation.decode.replicas 0 with prefill replicas leaves nothing to answer requests: prefill "
    "engines only compute KV; scale both roles to 0 together"
)
DISAGGREGATION_EXTRA_ARGS_MESSAGE = (
    "spec.serving.extraArgs may not set --kv-transfer-config while spec.disaggregation.mode is Disaggregated: "
    "shardwise renders "
    "it for each role from disaggregation.connector"
)


class PrefillSLO(_Model):
    ttftP95: str | None = Field(None, pattern=DURATION_PATTERN,
                                description="Time-to-first-token p95 the prefill role answers for, e.g. 2s.")


class DecodeSLO(_Model):
    itlP95: str | None = Field(None, pattern=DURATION_PATTERN,
                               description="Inter-token latency p95 the decode role answers for, e.g. 30ms.")


class PrefillRoleSpec(_Model):
    replicas: int = Field(1, ge=0, le=MAX_REPLICAS, description="Prefill engines (default 1); 0 lets the decode "
                          "engines prefill themselves.")
    tensor: int | None = Field(None, ge=1, le=512, description="Tensor-parallel degree of a prefill engine; "
                               "default: the plan's.")
    slo: PrefillSLO = Field(default_factory=PrefillSLO, description="Latency the prefill role answers for.",
                            **_EMPTY)
    autoscaling: ScalingBehaviourSpec | None = Field(
        None, description="Scale the prefill engines on slo.ttftP95 (the keys of spec.autoscaling, without slo); "
        "replicas is then ignored.")

    @model_validator(mode="after")
    def _scales_on_ttft(self) -> PrefillRoleSpec:  # the CEL rule, for files read offline
        if self.autoscaling is not None and self.slo.ttftP95 is None:
            raise ValueError(DISAGGREGATION_PREFILL_SLO_MESSAGE)
        return self

    model_config = ConfigDict(json_schema_extra=_rules(
        ("!has(self.autoscaling) || has(self.slo.ttftP95)", DISAGGREGATION_PREFILL_SLO_MESSAGE, ".slo"),
    ))


class DecodeRoleSpec(_Model):
    replicas: int = Field(1, ge=0, le=MAX_REPLICAS, description="Decode engines (default 1).")
    tensor: int | None = Field(None, ge=1, le=512, description="Tensor-parallel degree of a decode engine; "
                               "default: the plan's.")
    slo: DecodeSLO = Field(default_factory=DecodeSLO, description="Latency the decode role answers for.", **_EMPTY)
    autoscaling: ScalingBehaviourSpec | None = Field(
        None, description="Scale the decode engines on slo.itlP95 (the keys of spec.autoscaling, without slo); "
        "replicas is then ignored.")

    @model_validator(mode="after")
    def _scales_on_itl(self) -> DecodeRoleSpec:  # the CEL rule, for files read offline
        if self.autoscaling is not None and self.slo.itlP95 is None:
            raise ValueError(DISAGGREGATION_DECODE_SLO_MESSAGE)
        return self

    model_config = ConfigDict(json_schema_extra=_rules(
        ("!has(self.autoscaling) || has(self.slo.itlP95)", DISAGGREGATION_DECODE_SLO_MESSAGE, ".slo"),
    ))


class SharedKVStorage(_Model):
    claimName: str | None = Field(None, max_length=253, description="ReadWriteMany PersistentVolumeClaim both "
                                  "roles mount (ExampleConnector).")
    path: str = Field("/var/run/shardwise/kv", min_length=1, max_length=1024, pattern=r"^/\S*$",
                      description="Where the claim is mounted in both roles; vLLM's shared_storage_path.")


class DisaggregationSpec(_Model):
    """Prefill and decode on separate engines that hand the prompt's KV cache over a connector."""

    mode: DisaggregationMode = Field(
        DisaggregationMode.Aggregated, description="Aggregated: one pool serves both phases (the default). "
        "Disaggregated: a prefill "
        "Deployment and a decode Deployment, each with vLLM's --kv-transfer-config for its role; requests reach "
        "the decode engines, which prefill themselves unless a router hands them the prefill engines' KV.",
    )
    connector: KVConnector = Field(
        KVConnector.Auto, description="vLLM 0.32 KV connector: Auto (NixlConnector, for GPUs with RDMA or "
        "NVLink), NixlConnector, LMCacheConnectorV1, or ExampleConnector (files on a shared volume; CPU tests).",
    )
    sharedStorage: SharedKVStorage = Field(default_factory=SharedKVStorage,
                                           description="The shared folder of ExampleConnector.", **_EMPTY)
    prefill: PrefillRoleSpec = Field(default_factory=PrefillRoleSpec, description="The prefill role.", **_EMPTY)
    decode: DecodeRoleSpec = Field(default_factory=DecodeRoleSpec, description="The decode role.", **_EMPTY)

    @model_validator(mode="after")
    def _runnable(self) -> DisaggregationSpec:  # the CEL rules below, for files read offline
        if self.mode is DisaggregationMode.Aggregated:
            return self
        if self.connector is KVConnector.OffloadingConnector:
            raise ValueError(DISAGGREGATION_OFFLOADING_MESSAGE)
        if self.connector is KVConnector.ExampleConnector and not self.sharedStorage.claimName:
            raise ValueError(DISAGGREGATION_STORAGE_MESSAGE)
        if self.decode.replicas == 0 and self.prefill.replicas > 0 and self.decode.autoscaling is None:
            raise ValueError(DISAGGREGATION_DECODE_MESSAGE)
        if _to_zero(self.prefill.autoscaling) != _to_zero(self.decode.autoscaling):
            raise ValueError(DISAGGREGATION_PAIR_ZERO_MESSAGE)
        return self

    model_config = ConfigDict(json_schema_extra=_rules(
        ("self.mode == 'Aggregated' || self.connector != 'OffloadingConnector'", DISAGGREGATION_OFFLOADING_MESSAGE,
         ".connector"),
        ("self.mode == 'Aggregated' || self.connector != 'ExampleConnector' || has(self.sharedStorage.claimName)",
         DISAGGREGATION_STORAGE_MESSAGE, ".sharedStorage"),
        ("self.mode == 'Aggregated' || self.decode.replicas > 0 || self.prefill.replicas == 0 || "
         "has(self.decode.autoscaling)",
         DISAGGREGATION_DECODE_MESSAGE, ".decode.replicas"),
        ("self.mode == 'Aggregated' || "
         "(has(self.prefill.autoscaling) && self.prefill.autoscaling.minReplicas == 0) == "
         "(has(self.decode.autoscaling) && self.decode.autoscaling.minReplicas == 0)",
         DISAGGREGATION_PAIR_ZERO_MESSAGE),
    ))


def _to_zero(scaling: ScalingBehaviourSpec | None) -> bool:
    return scaling is not None and scaling.minReplicas == 0


# The --kv-transfer-config spellings argparse accepts in extraArgs (prefixes and `_` forms too).
_KV_FLAG_CEL = "a.replace('_', '-').startsWith('--kv-transfer-config') || a.replace('_', '-') == '--kv-transfer'"


def _kv_flag(item: str) -> bool:
    flag = item.replace("_", "-")
    return flag.startswith("--kv-transfer-config") or flag == "--kv-transfer"


# `self.engine` is defaulted by the API server, but a CEL rule may run on an object written before
# the field existed: has() keeps those vLLM.
_OTHER_ENGINE = "(has(self.engine) && self.engine != 'vllm')"
_ENGINE_RULES = [
    {"rule": f"!{_OTHER_ENGINE} || ((!has(self.adapters) || size(self.adapters) == 0) && !has(self.lora))",
     "message": engines.LORA_MESSAGE, "fieldPath": ".engine"},
    {"rule": f"!{_OTHER_ENGINE} || !has(self.disaggregation) || self.disaggregation.mode != 'Disaggregated'",
     "message": engines.DISAGGREGATION_MESSAGE, "fieldPath": ".engine"},
    {"rule": f"!{_OTHER_ENGINE} || !has(self.serving.extraArgs) || size(self.serving.extraArgs) == 0",
     "message": engines.EXTRA_ARGS_MESSAGE, "fieldPath": ".serving.extraArgs"},
    {"rule": "(has(self.engine) && self.engine == 'sglang') || !has(self.serving.sglangExtraArgs) || "
             "size(self.serving.sglangExtraArgs) == 0",
     "message": engines.SGLANG_ARGS_MESSAGE, "fieldPath": ".serving.sglangExtraArgs"},
    {"rule": "(has(self.engine) && self.engine == 'trtllm') || !has(self.serving.trtllmExtraArgs) || "
             "size(self.serving.trtllmExtraArgs) == 0",
     "message": engines.TRTLLM_ARGS_MESSAGE, "fieldPath": ".serving.trtllmExtraArgs"},
]


SPILLOVER_SELF_MESSAGE = ("spec.spillover.model is this deployment's own served name: it must name a model the "
                          "Provider offers (one of its spec.models[].name), which is what answers while this one wakes")


class SpilloverSpec(_Model):
    """Where a request goes instead of waiting, while this deployment cannot answer it (docs/providers.md)."""

    provider: str = Field(..., min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                          description="A Provider in this namespace.")
    model: str = Field(..., min_length=1, max_length=253,
                       description="The Provider's model to answer with: a `name` under the Provider's "
                       "spec.models (what callers would send for it), not this deployment's served name.")
    # items as an enum: a one-value Literal alone is JSON Schema `const`, which the API server does not enforce
    when: list[Literal["Waking"]] = Field(["Waking"], min_length=1, max_length=1,
                                          json_schema_extra={"items": {"type": "string", "enum": ["Waking"]}},
                                          description="When to spill: Waking (no replica Ready while it "
                                          "scales from zero or starts; the request is answered at once "
                                          "instead of held).")
    maxShare: float = Field(1.0, gt=0, le=1, description="The most of this model's requests, while it "
                            "spills, sent to the provider (0 < maxShare <= 1); the others are held as without "
                            "spill-over.")


class InferenceDeploymentSpec(_Model):
    model: ModelSpec = Field(..., description="The model to serve.")
    engine: engines.Engine = Field(
        engines.Engine.vllm, description="The serving engine: vllm (vLLM 0.32, the default), sglang (SGLang 0.5.23) "
        "or trtllm (TensorRT-LLM `trtllm-serve`, release 1.0). With serving.image left at its default, the "
        "operator's image for the engine is used (docs/engines.md).",
    )
    serving: ServingSpec = Field(default_factory=ServingSpec, description="vLLM serving settings.", **_EMPTY)
    parallelism: ParallelismSpec = Field(
        default_factory=ParallelismSpec, description="How the planner chooses tensor/pipeline parallelism.", **_EMPTY
    )
    placement: PlacementSpec = Field(default_factory=PlacementSpec, description="Where serving pods may run.", **_EMPTY)
    workload: WorkloadSpec = Field(
        default_factory=WorkloadSpec, description="Typical requests and load the predictions are for.", **_EMPTY
    )
    # No default in the CRD (the model's 1 applies when it is unset), so CEL can tell "not set" apart.
    replicas: int = Field(1, ge=0, le=MAX_REPLICAS, description="Serving replicas when autoscaling is off (default 1).",
                          json_schema_extra=_no_default)
    autoscaling: AutoscalingSpec | None = Field(
        None, description="Scale replicas to keep latency under SLOs; then leave spec.replicas unset."
    )
    pricing: PricingSpec = Field(default_factory=PricingSpec, description="GPU price used for cost figures.", **_EMPTY)
    spillover: SpilloverSpec | None = Field(
        None, description="Answer through a hosted Provider's model instead of holding a request while no "
        "replica is Ready (waking from zero); absent: requests are held as usual."
    )
    rollout: RolloutSpec = Field(
        default_factory=RolloutSpec, description="How a new version replaces the running one.", **_EMPTY
    )
    routing: RoutingSpec | None = Field(
        None, description="Standard routing objects for an existing Gateway API Inference Extension gateway "
        "(docs/gateway.md)."
    )
    adapters: list[AdapterSpec] = Field(
        default_factory=list, max_length=MAX_ADAPTERS, description="LoRA adapters served on this deployment's base "
        "model, each under its own name; added and removed on the running engines without a restart."
    )
    lora: LoraSpec | None = Field(
        None, description="LoRA serving limits; set (even to {}) with the first adapter, or before it to add the "
        "first one without restarting the pods."
    )
    disaggregation: DisaggregationSpec | None = Field(
        None, description="Prefill and decode on separate engines (docs/disaggregation.md); unset or mode "
        "Aggregated: "
        "one pool serves both."
    )

    @model_validator(mode="after")
    def _adapter_names(self) -> InferenceDeploymentSpec:  # the first two CEL rules, for files read offline
        names = [a.name for a in self.adapters]
        if len(set(names)) != len(names):
            raise ValueError("spec.adapters: each adapter needs a name of its own")
        if self.model.servedName is not None and self.model.servedName in names:
            raise ValueError("spec.adapters: an adapter may not take the base model's served name (model.servedName)")
        return self

    @model_validator(mode="after")
    def _disaggregation_runs(self) -> InferenceDeploymentSpec:  # the CEL rules, for files read offline
        d = self.disaggregation
        if d is None or d.mode is DisaggregationMode.Aggregated:
            return self
        if self.autoscaling is not None:
            raise ValueError(DISAGGREGATION_AUTOSCALING_MESSAGE)
        if d.connector is KVConnector.ExampleConnector and self.adapters:
            raise ValueError(DISAGGREGATION_ADAPTERS_MESSAGE)
        if any(_kv_flag(a) for a in self.serving.extraArgs):
            raise ValueError(DISAGGREGATION_EXTRA_ARGS_MESSAGE)
        return self

    @model_validator(mode="after")
    def _engine_can_serve(self) -> InferenceDeploymentSpec:  # the engine CEL rules, for files read offline
        for problem, present in _engine_refusals(self):
            if present:
                raise ValueError(problem)
        return self

    @model_validator(mode="after")
    def _workload_fits(self) -> InferenceDeploymentSpec:  # workload_fit.CEL_RULE, for files read offline
        declared = self.workload.model_fields_set & {"promptTokens", "outputTokens"}
        problem = workload_fit.context_problem(self.workload.promptTokens, self.workload.outputTokens,
                                               self.serving.maxModelLen)
        if declared and problem is not None:
            raise ValueError(problem)
        return self

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [{
        "rule": "!has(self.adapters) || self.adapters.all(a, self.adapters.exists_one(b, b.name == a.name))",
        "message": "spec.adapters: each adapter needs a name of its own", "fieldPath": ".adapters",
    }, {
        "rule": "!has(self.adapters) || !has(self.model.servedName) || "
                "self.adapters.all(a, a.name != self.model.servedName)",
        "message": "spec.adapters: an adapter may not take the base model's served name (model.servedName)",
        "fieldPath": ".adapters",
    }, {
        # Creating (or adding autoscaling to) an object with both is refused. An update that
        # keeps autoscaling as it was may set replicas: that is `kubectl scale` (an HPA) through the
        # scale subresource; the operator then reports ReplicasIgnored instead of acting on it.
        "rule": "!has(self.autoscaling) || !has(self.replicas) || (oldSelf.hasValue() && "
                "has(oldSelf.value().autoscaling) && oldSelf.value().autoscaling == self.autoscaling)",
        "optionalOldSelf": True,
        "message": "spec.replicas and spec.autoscaling cannot both be set: with autoscaling, shardwise owns the "
                   "replica count (between autoscaling.minReplicas and maxReplicas); remove spec.replicas",
    }, {
        "rule": "!has(self.spillover) || !has(self.model.servedName) || self.spillover.model != self.model.servedName",
        "message": SPILLOVER_SELF_MESSAGE, "fieldPath": ".spillover.model",
    }, {
        "rule": "!(has(self.disaggregation) && self.disaggregation.mode == 'Disaggregated') || !has(self.autoscaling)",
        "message": DISAGGREGATION_AUTOSCALING_MESSAGE, "fieldPath": ".disaggregation",
    }, {
        "rule": "!(has(self.disaggregation) && self.disaggregation.mode == 'Disaggregated') || self.disaggregation.connector != 'ExampleConnector' || "
                "!has(self.adapters) || size(self.adapters) == 0",
        "message": DISAGGREGATION_ADAPTERS_MESSAGE, "fieldPath": ".disaggregation.connector",
    }, {
        "rule": "!(has(self.disaggregation) && self.disaggregation.mode == 'Disaggregated') || !has(self.serving.extraArgs) || !self.serving.extraArgs.exists(a, " + _KV_FLAG_CEL + ")",
        "message": DISAGGREGATION_EXTRA_ARGS_MESSAGE, "fieldPath": ".serving.extraArgs",
    }, *_ENGINE_RULES, workload_fit.CEL_RULE]})


def _engine_refusals(spec: InferenceDeploymentSpec) -> list[tuple[str, bool]]:
    """What spec.engine cannot do in this version (engines.*_MESSAGE), each with whether `spec` asks it."""
    other = spec.engine is not engines.Engine.vllm
    disaggregated = spec.disaggregation is not None and spec.disaggregation.mode is DisaggregationMode.Disaggregated
    return [
        (engines.LORA_MESSAGE, other and (bool(spec.adapters) or spec.lora is not None)),
        (engines.DISAGGREGATION_MESSAGE, other and disaggregated),
        (engines.EXTRA_ARGS_MESSAGE, other and bool(spec.serving.extraArgs)),
        (engines.SGLANG_ARGS_MESSAGE, spec.engine is not engines.Engine.sglang and bool(spec.serving.sglangExtraArgs)),
        (engines.TRTLLM_ARGS_MESSAGE, spec.engine is not engines.Engine.trtllm and bool(spec.serving.trtllmExtraArgs)),
    ]




class Condition(_Model):
    """Shaped like metav1.Condition."""

    type: str
    status: str = Field(..., pattern=r"^(True|False|Unknown)$")
    reason: str
    message: str = ""
    lastTransitionTime: str
    observedGeneration: int | None = None


class InferenceDeploymentStatus(_Model):
    # Defaulted to 0 by the API server (status itself defaults to {}), so a new object reads
    # "generation 1 not yet observed" (kstatus InProgress) before the operator writes anything.
    observedGeneration: int | None = Field(None, description="The spec generation this status describes "
                                           "(0: not yet observed).", json_schema_extra={"default": 0})
    phase: str | None = Field(None, description="Pending, Progressing, Ready, Degraded or Failed.")
    conditions: list[Condition] = Field(default_factory=list, description="Ready, Progressing, Degraded, Planned, SLOMet.")
    replicas: int | None = Field(None, description="Serving replicas that exist.")
    readyReplicas: int | None = Field(None, description="Serving replicas that are ready.")
    desiredReplicas: int | None = Field(None, description="Replicas shardwise wants (autoscaling decisions land here).")
    selector: str | None = Field(None, description="Label selector of the serving pods (scale subresource).")
    endpoint: str | None = Field(None, description="OpenAI-compatible base URL inside the cluster.")
    plan: dict[str, Any] | None = Field(None, description="The parallelism plan in use, with predictions and reasons.")
    latency: dict[str, Any] | None = Field(None, description="Observed latency and throughput over the window.")
    cost: dict[str, Any] | None = Field(None, description="Cost at the observed throughput.")
    prediction: dict[str, Any] | None = Field(
        None,
        description="Predicted versus observed TTFT, ITL and tokens/s per replica at the observed load, with "
        "their ratio and the correction learned for this model, GPU product and layout.",
    )
    autoscaling: dict[str, Any] | None = Field(None, description="The last scaling decision and its reason.")
    modelCache: dict[str, Any] | None = Field(
        None, description="The weight cache in use: claim, pinned commit, download progress (bytes, rate, time left)."
    )
    adapters: list[dict[str, Any]] | None = Field(
        None, description="Per LoRA adapter: replicas that serve it (loadedReplicas of replicas), its commit, and "
        "why not when it is not loaded (reason, message).",
    )
    rollout: dict[str, Any] | None = Field(
        None, description="The current or last rollout: strategy and why (free GPUs versus needed), progress, "
        "the pod or group loading, and what would unblock it."
    )
    roles: dict[str, Any] | None = Field(
        None, description="spec.disaggregation: per role (prefill, decode) its workload, layout (TP), replicas, "
        "ready and desired replicas; the top-level counts are their sums.")
    roleSummary: str | None = Field(
        None, description="The roles in one line (prefill 2/2 TP1, decode 1/1 TP4) for kubectl get -o wide.")
