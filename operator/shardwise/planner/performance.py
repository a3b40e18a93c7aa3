"""Performance model: predicted inter-token latency (ITL), time to first token (TTFT) and tokens/s.

Decoding is bound by memory reads, prefill by compute; TP adds two all-reduces per layer, PP adds a
hop per stage boundary. Everything below is per replica at the target concurrency C.

Decode step (ITL). With PP, vLLM keeps PP micro-batches of B = ceil(C / PP) sequences in flight, one
per stage, so a token crosses every stage once per step:

    stage  = max(bytes read / (HBM bandwidth x 0.8), FLOPs / (TFLOP/s x 0.5))
             + layers/PP x 2 x all-reduce(TP, B x hiddenSize x 2 bytes)
    bytes read = weights x share / TP + B x context x KV bytes/token x share / min(TP, kvHeads)
    ITL    = PP x stage + (PP - 1) x hop + 0.5 ms step overhead (scheduler, sampler, launch)

- context = the reference request's mean length, min(maxModelLen, 1024 + 256/2) tokens.
- MoE: a batch of B tokens touches a fraction 1 - (1 - active/total)^B of the expert weights (each
  token reads `active` parameters' worth; routing treated as independent), at least `active`.
- All-reduce (ring): 2(TP-1)/TP x message / link bandwidth + alpha + 2(TP-1) x beta. Link bandwidth
  is one direction, 80% achieved. NVLink: bandwidth = label / 2; alpha 5 us, beta 0.25 us, because
  vLLM's custom all-reduce does small messages in one shot over NVLink P2P
  (vllm/distributed/device_communicators/custom_all_reduce.py) in single-digit microseconds. PCIe:
  GPU's PCIe bandwidth, alpha 10 us, beta 3 us: NCCL rings through the host bridge and vLLM turns
  its custom all-reduce off beyond two GPUs without full NVLink (GPU-FACTS.md), so each of the
  2(TP-1) ring steps pays a PCIe round trip: tens of microseconds per call.
  NVLink across nodes of one clique (GB200 NVL72): alpha 8 us.
- PP hop: activations of the micro-batch; 10 us + bytes / PCIe (or NVLink) bandwidth inside a node,
  25 us + bytes / 12.5 GB/s (100 Gb/s, a conservative NIC share per GPU) across nodes.

TTFT, reference prompt of 1024 tokens on an idle replica: stages run one after another for a single
prompt, so PP does not shorten it (the issue's 2 x active x tokens / (TP x PP) holds for throughput,
below, not for one prompt; the sources in GPU-FACTS.md report PP with higher TTFT than TP):

    TTFT = PP x [max(2 x active x tokens x share / TP / (TFLOP/s x 0.5), weights x share / TP / BW)
                  + layers/PP x 2 x all-reduce(TP, tokens x hiddenSize x 2 bytes)] + hops + 0.5 ms

Throughput: in steady state each of the C streams prefills a 1024-token prompt and decodes 256
tokens. A prefill occupies each stage for one stage-time (PP pipelines prompts), so per cycle of
256 steps:

    tokens/s = C x 256 / (256 x ITL + C x prefill stage time)

This is where PP gains on PCIe: TP's prefill all-reduces carry tokens x hiddenSize bytes and become
slow on PCIe, while PP's stage boundary carries the same bytes once. Decoding moves B x hiddenSize
bytes per all-reduce: with few streams latency, not bandwidth, dominates and TP's split of the
weight reads wins on ITL even over PCIe; with many streams (hundreds) the all-reduces grow and PP
wins throughput, as vLLM's docs advise for PCIe. The reason states the margin either way.

Floor: no prediction beats active weight bytes / (GPUs x peak HBM bandwidth), the time for every GPU
of the replica to read its share of the weights once at full speed.

Worked example, Llama-3.1-70B bf16, TP4 on H100 SXM (3,350 GB/s, NVLink 900 GB/s), C = 16:
weights per GPU 35.3 GB / 2,680 GB/s = 13.2 ms; KV 16 x 1152 x 327,680 B / 4 = 1.5 GB -> 0.56 ms;
all-reduce of 16 x 8192 x 2 B = 262 kB: 1.5 x 262 kB / 360 GB/s + 5 us + 6 x 0.25 us = 7.6 us,
x 160 = 1.2 ms; ITL = 15.0 + 0.5 = 15.5 ms, about 1,000 tokens/s decode-only for 16 streams.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardwise.planner import memory, models

MEMORY_BANDWIDTH_EFFICIENCY = 0.8
COMPUTE_EFFICIENCY = 0.5
LINK_EFFICIENCY = 0.8
STEP_OVERHEAD_S = 0.5e-3
REFERENCE_PROMPT_TOKENS = 1024
REFERENCE_OUTPUT_TOKENS = 256
ACTIVATION_BYTES = 2
INTER_NODE_GBPS = 12.5
INTER_NODE_LATENCY_S = 25e-6
INTRA_NODE_HOP_LATENCY_S = 10e-6


@dataclass(frozen=True)
class Link:
    """A collective's path: one-direction bandwidth and the latency terms of a ring all-reduce."""

    kind: str  # nvlink | nvlink-fabric | pcie
    gbps: float
    alpha_s: float
    beta_s: float

    def all_reduce_s(self, tp: int, message_bytes: float) -> float:
        if tp == 1:
            return 0.0
        steps = 2 * (tp - 1)
        transfer = steps / tp * message_bytes / (self.gbps * 1e9 * LINK_EFFICIENCY)
        return transfer + self.alpha_s + steps * self.beta_s


def nvlink(nvlink_gbps: float, *, across_nodes: bool = False) -> Link:
    """NVLink from the per-GPU bandwidth as labelled (both directions summed)."""
    return Link(
        kind="nvlink-fabric" if across_nodes else "nvlink",
        gbps=nvlink_gbps / 2,
        alpha_s=8e-6 if across_nodes else 5e-6,
        beta_s=0.25e-6,
    )


def pcie(pcie_gbps: float) -> Link:
    return Link(kind="pcie", gbps=pcie_gbps, alpha_s=10e-6, beta_s=3e-6)


@dataclass(frozen=True)
class Hardware:
    """What one replica runs on: per-GPU figures and how its GPUs talk."""

    memory_bandwidth_gbps: float
    bf16_tflops: float
    tp_link: Link
    stage_link: Link  # PP hop inside a node
    inter_node_hops: int  # PP boundaries that cross nodes


@dataclass(frozen=True)
class Prediction:
    itl_s: float
    ttft_s: float
    tokens_per_s: float
    floor_s: float


@dataclass(frozen=True)
class Workload:
    """The model and request-side numbers the prediction needs."""

    arch: models.ModelArch
    bytes_per_weight: float
    max_model_len: int
    max_concurrency: int


def _touched_weight_bytes(work: Workload, batch: int) -> float:
    total = work.arch.parameters * work.bytes_per_weight
    active = work.arch.active_parameters * work.bytes_per_weight
    if not work.arch.is_moe:
        return total
    return max(active, total * (1 - (1 - active / total) ** batch))


def _hops_s(hw: Hardware, pp: int, message_bytes: float) -> float:
    inter = hw.inter_node_hops
    intra = pp - 1 - inter
    intra_s = intra * (INTRA_NODE_HOP_LATENCY_S + message_bytes / (hw.stage_link.gbps * 1e9))
    inter_s = inter * (INTER_NODE_LATENCY_S + message_bytes / (INTER_NODE_GBPS * 1e9))
    return intra_s + inter_s


def _stage_s(
    work: Workload, hw: Hardware, tp: int, pp: int, *, tokens: int, read_bytes: float
) -> float:
    """One stage's time for `tokens` tokens whose per-GPU memory reads total `read_bytes`."""
    arch = work.arch
    layers = math.ceil(arch.layers / pp)
    share = memory.stage_share(arch.layers, pp)
    flops = 2 * arch.active_parameters * tokens * share / tp
    compute_s = flops / (hw.bf16_tflops * 1e12 * COMPUTE_EFFICIENCY)
    memory_s = read_bytes / (hw.memory_bandwidth_gbps * 1e9 * MEMORY_BANDWIDTH_EFFICIENCY)
    message = tokens * arch.hidden_size * ACTIVATION_BYTES
    return max(compute_s, memory_s) + layers * 2 * hw.tp_link.all_reduce_s(tp, message)


def predict(work: Workload, hw: Hardware, tp: int, pp: int) -> Prediction:
    arch = work.arch
    share = memory.stage_share(arch.layers, pp)
    concurrency = work.max_concurrency
    batch = math.ceil(concurrency / pp)
    context = min(work.max_model_len, REFERENCE_PROMPT_TOKENS + REFERENCE_OUTPUT_TOKENS // 2)
    kv_per_token = memory.kv_bytes_per_token(arch) * share / min(tp, arch.kv_heads)

    decode_reads = _touched_weight_bytes(work, batch) * share / tp + batch * context * kv_per_token
    decode_stage = _stage_s(work, hw, tp, pp, tokens=batch, read_bytes=decode_reads)
    decode_hops = _hops_s(hw, pp, batch * arch.hidden_size * ACTIVATION_BYTES)
    floor = (
        arch.active_parameters * work.bytes_per_weight / (tp * pp * hw.memory_bandwidth_gbps * 1e9)
    )
    itl = max(floor, pp * decode_stage + decode_hops + STEP_OVERHEAD_S)

    prompt = min(REFERENCE_PROMPT_TOKENS, work.max_model_len)
    prefill_reads = arch.parameters * work.bytes_per_weight * share / tp
    prefill_stage = _stage_s(work, hw, tp, pp, tokens=prompt, read_bytes=prefill_reads)
    prefill_hops = _hops_s(hw, pp, prompt * arch.hidden_size * ACTIVATION_BYTES)
    ttft = max(floor, pp * prefill_stage + prefill_hops + STEP_OVERHEAD_S)

    output = REFERENCE_OUTPUT_TOKENS
    cycle = output * itl + concurrency * prefill_stage
    return Prediction(
        itl_s=itl, ttft_s=ttft, tokens_per_s=concurrency * output / cycle, floor_s=floor
    )
