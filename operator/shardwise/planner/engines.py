"""What the serving engine (spec.engine: vllm, sglang, trtllm) changes in a plan.

Two things differ per engine, both pure arithmetic over the layout's figures:

- Memory. serving.gpuMemoryUtilization is rendered as each engine's own memory flag, and each
  reads it differently (docs/engines.md; flags in SERVING-SHAPES.md D and E):
  vLLM `--gpu-memory-utilization u`: weights, KV cache, activations and graphs within u x GPU;
  SGLang `--mem-fraction-static u`: "the fraction of the memory used for static allocation (model
  weights and KV cache memory pool)" (0.5.23 --help, tests/fixtures/sglang-0.5.23), so activations
  and CUDA graphs live in the other 1 - u, and only what they need beyond it comes out of the pool;
  TensorRT-LLM `--kv_cache_free_gpu_memory_fraction f` (KvCacheConfig.free_gpu_memory_fraction):
  the KV cache takes f of the memory still free once weights and activations are loaded, so the
  weights are never counted against f.
  memory.usable_gib turns each into the `usable` GiB of memory.MemoryFit (weights + overhead + the KV room), so a fit
  and its KV room are computed one way for every engine.
- Speed. The calibration's per-engine factor on the step time (efficiency.yaml engineFactors,
  fitted only where one source measured vLLM and that engine on one model, GPU and workload:
  calibrate.paired_engines): ITL and TTFT times it, tokens/s over it. And TensorRT-LLM's
  `--max_num_tokens` is rendered as the context length (render/trtllm_args.py), so its prefill
  budget per step is a whole prompt, where vLLM and SGLang chunk.
"""

from __future__ import annotations

import dataclasses

from shardwise.api import engines as api_engines
from shardwise.planner import efficiency, performance

VLLM, SGLANG, TRTLLM = "vllm", "sglang", "trtllm"
ALL = (VLLM, SGLANG, TRTLLM)
LABELS = {VLLM: "vLLM", SGLANG: "SGLang", TRTLLM: "TensorRT-LLM"}
# trtllm-serve across nodes (MPI ranks under trtllm-llmapi-launch) is not rendered yet: such a plan
# is reported EngineCannotServe (decide/engine.py), so a comparison does not offer it.
ONE_NODE_ONLY = frozenset({TRTLLM})


def batched_tokens(engine: str, gpu_memory_mib: int, max_model_len: int) -> int:
    """Prompt tokens one step may schedule: trtllm-serve's --max_num_tokens as rendered."""
    if engine == TRTLLM:
        return max_model_len
    return performance.default_batched_tokens(gpu_memory_mib)


def factor(engine: str, eff: efficiency.Efficiency | None = None) -> float:
    return (eff or efficiency.fitted()).engine_factor(engine)


def apply(prediction: performance.Prediction, engine: str,
          eff: efficiency.Efficiency | None = None) -> performance.Prediction:
    """The prediction with the engine's step time: ITL and TTFT x factor, tokens/s / factor."""
    f = factor(engine, eff)
    if f == 1.0:
        return prediction
    return dataclasses.replace(prediction, itl_s=prediction.itl_s * f,
                               ttft_s=prediction.ttft_s * f,
                               tokens_per_s=prediction.tokens_per_s / f)


def refusal(engine: str, *, lora: bool, disaggregated: bool) -> str | None:
    """Why a spec with these features cannot run on `engine` (the admission rules' sentences in
    shardwise.api.engines), or None."""
    if engine == VLLM:
        return None
    if lora:
        return api_engines.LORA_MESSAGE
    if disaggregated:
        return api_engines.DISAGGREGATION_MESSAGE
    return None
