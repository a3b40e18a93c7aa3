"""Performance model: predicted inter-token latency (ITL), time to first token (TTFT) and tokens/s
of one replica under a planned workload (prompt and output tokens, concurrency or request rate).

It models vLLM's engine step by step. Each step runs every running sequence's next token (the decode
batch) plus the prompt tokens admitted by chunked prefill, up to `max_num_batched_tokens`. One
pipeline stage of one step costs

    stage = max(FLOPs / (peak x compute efficiency), bytes / (HBM bandwidth x memory efficiency))
            + layers/PP x (layer overhead [+ MoE layer overhead])
            + layers/PP x 2 x all-reduce(TP, tokens x hiddenSize x 2 bytes)

- FLOPs = 2 x active parameters x tokens / TP + attention (4 x layers x heads x headDim x attended
  tokens / TP); the peak is the fp8 rate for fp8 weights on GPUs with fp8 tensor cores, else bf16
  (AWQ/GPTQ int4 and fp8 on Ampere run weight-only: bytes shrink, compute stays at bf16).
- bytes = weights touched / TP (a mixture-of-experts batch of n tokens touches
  1 - (1 - active/total)^n of the expert weights) + KV cache read for the decode batch.
- All-reduce: ring, 2(TP-1)/TP x message / link + latency terms; NVLink uses vLLM's one-shot custom
  all-reduce (microseconds), PCIe pays NCCL ring steps through the host bridge (see `Link`).
- The fixed per-layer cost (kernel launches that CUDA graphs do not hide, MoE routing and grouped
  GEMMs) does not shrink with TP: this is why MoE and small models scale sublinearly in TP.

A step over PP stages: vLLM keeps PP micro-batches of running/PP sequences in flight, so a token
crosses every stage once per step: step = PP x stage + hops + step overhead. ITL is that step time
with the planned load's prefill chunks mixed in, so ITL rises with load and with prompt length.

Load. With concurrency C (closed loop, as `vllm bench serve --max-concurrency`), the engine runs
R = min(C, maxConcurrency, whole sequences of prompt+output tokens the KV cache holds); the rest
queue (admission: the KV room is the memory plan's, GPU memory x gpuMemoryUtilization less weights
and overhead, over the per-token KV bytes). A request lives L = max(O, R x P / prefill budget) +
ceil(P / budget) - 1 steps, so the steps carry R decodes and R x P / L prompt tokens on average.
Prompt tokens come in chunks (min(P, budget)): with fewer than one chunk per step, that share of
the steps carries a whole chunk and stalls its decodes for the chunk's time, the rest decode
alone. ITL is the mean step a decoding sequence sees (the other R - 1 sequences' prompts: one
sequence alone decodes in pure decode steps); output tokens/s = R x O / (L x mean step).
TTFT = queue wait + prefill chunks (each a step shared with the decodes) + half a step (a request
arrives mid-step). Closed loop: wait = (C/R - 1) x request time (Little's law). With a request rate
instead, R solves rate x request time = R, and the wait is Sakasegawa's M/M/c approximation.
A burst (every request at once, `--request-rate inf`): at full admission the engine completes mu
requests/s; each request also costs a serial intake (API server and engine-core CPU, fitted) that
does not overlap the engine's work, so requests flow at 1 / (intake + 1/mu) and the engine runs
the R that rate keeps in flight. Offline harnesses (no API server) have no intake.

Expert and data parallelism (layouts.py; vLLM's DP attention and `--enable-expert-parallel`).
A layout of DP engines runs each engine on its share of the load (concurrency, request rate,
max-num-seqs and KV room over DP) and the replica's tokens/s is DP times an engine's. The engines
step in lock-step (vLLM's DP coordinator), so a MoE layer serves the tokens of every engine:

    read  = weights touched by DP x tokens / (TP x DP) + the non-expert weights x (1/TP - 1/(TP x DP))
            (attention and shared experts are whole on every DP rank; TP x PP layouts read as before)
    comm  = layers x [all-reduce(TP, attention) on the TP link
            + EP: dispatch and combine all-to-all, tokens x topK x hiddenSize x 2 bytes / TP each,
              (EP-1)/EP of it crossing the EP link
            + DP without EP: the experts' DP x TP tensor-parallel group, an all-reduce of DP x tokens
              on the EP link]
            + one DP synchronisation per step (the link's latency)
    and a step runs at the pace of the busiest engine: its decodes are the mean plus one standard
    deviation (sqrt of the mean), which costs DP most at low load (one sequence per rank on
    average: two on the busiest) and little at high load.

The EP link is NVLink (or PCIe) inside a node and the inter-node network when the ranks span
nodes (INTER_NODE_GBPS per GPU, as for PP hops), NVLink fabric inside one clique: EP inside an
NVLink domain is cheap, across nodes it is what DP's smaller per-rank batches must pay for.

Floors, never crossed: ITL and TTFT >= active weight bytes / (TP x HBM bandwidth) (every stage reads
its weights once per step, stages in sequence); tokens/s <= GPUs x peak / (2 x active parameters).

The constants (efficiencies per GPU family, step and layer overheads) are fitted on published
measurements: efficiency.yaml, measurements.yaml, docs/planner-calibration.md.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from shardwise.planner import efficiency, memory, models

LINK_EFFICIENCY = 0.8
ACTIVATION_BYTES = 2
INTER_NODE_GBPS = 12.5
INTER_NODE_LATENCY_S = 25e-6
INTRA_NODE_HOP_LATENCY_S = 10e-6
DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 256
# vLLM's default --max-num-batched-tokens for the API server: 8192 on GPUs of 70 GiB and more,
# 2048 below (vllm/engine/arg_utils.py, default_max_num_batched_tokens).
LARGE_GPU_BATCHED_TOKENS = 8192
SMALL_GPU_BATCHED_TOKENS = 2048


def default_batched_tokens(gpu_memory_mib: int) -> int:
    """vLLM's default chunked-prefill budget for a GPU of this memory size."""
    large = gpu_memory_mib * memory.MIB >= 70 * memory.GIB
    return LARGE_GPU_BATCHED_TOKENS if large else SMALL_GPU_BATCHED_TOKENS


# A rate the replica cannot serve gets a TTFT as if 99% busy, and `saturated` says so.
_MAX_UTILIZATION = 0.99


@dataclass(frozen=True)
class Link:
    """A collective's path: one-direction bandwidth and the latency terms of a ring all-reduce."""

    kind: str  # nvlink | nvlink-fabric | pcie | network
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
    fp8_tflops: float = 0.0
    family: str = "unknown"
    ep_link: Link | None = None  # what EP's all-to-all and DP's expert group cross; None: tp_link


def network() -> Link:
    """The inter-node fabric as the planner knows it: INTER_NODE_GBPS per GPU."""
    return Link(kind="network", gbps=INTER_NODE_GBPS, alpha_s=INTER_NODE_LATENCY_S, beta_s=2e-6)


@dataclass(frozen=True)
class Workload:
    """The model, the engine limits and the traffic the prediction is for."""

    arch: models.ModelArch
    bytes_per_weight: float
    max_model_len: int
    max_concurrency: int  # vLLM --max-num-seqs
    prompt_tokens: int = DEFAULT_PROMPT_TOKENS
    output_tokens: int = DEFAULT_OUTPUT_TOKENS
    concurrency: int | None = None  # planned requests in flight; default max_concurrency
    request_rate: float | None = None  # planned requests/s (open loop); wins over concurrency
    kv_capacity_tokens: float | None = None  # KV cache room per replica; None = unbounded
    fp8_compute: bool = False  # fp8 weights and activations (W8A8) where the GPU has fp8
    batched_tokens: int = SMALL_GPU_BATCHED_TOKENS  # vLLM --max-num-batched-tokens
    kv_bytes_per_element: float = memory.KV_BYTES_PER_ELEMENT
    # Every request at once (`vllm bench serve --request-rate inf`): the engine admits what its KV
    # cache holds, the rest wait; the requests reach it through a serial intake (eff.intake_s).
    burst: bool = False
    api_server: bool = True  # requests come through the HTTP API server (not an offline harness)


@dataclass(frozen=True)
class Prediction:
    itl_s: float
    ttft_s: float
    tokens_per_s: float  # output tokens/s at the planned load
    floor_s: float
    running: float = 0.0  # sequences decoding at once at the planned load
    saturated: bool = False  # the planned request rate exceeds what the replica serves


def _touched_weight_bytes(work: Workload, tokens: float) -> float:
    total = work.arch.parameters * work.bytes_per_weight
    active = work.arch.active_parameters * work.bytes_per_weight
    if not work.arch.is_moe:
        return total
    return max(active, total * (1 - (1 - active / total) ** max(tokens, 1.0)))


def _hops_s(hw: Hardware, pp: int, message_bytes: float) -> float:
    inter = hw.inter_node_hops
    intra = pp - 1 - inter
    # No hop, no link to cross: a one-GPU "domain" may carry a link of 0 GB/s (nothing to divide by).
    intra_s = intra * (INTRA_NODE_HOP_LATENCY_S + message_bytes / (hw.stage_link.gbps * 1e9)) if intra > 0 else 0.0
    inter_s = inter * (INTER_NODE_LATENCY_S + message_bytes / (INTER_NODE_GBPS * 1e9))
    return intra_s + inter_s


@dataclass(frozen=True)
class _Engine:
    """Per-layout constants of one replica, computed once per prediction."""

    work: Workload
    hw: Hardware
    tp: int
    pp: int
    eff: efficiency.Efficiency
    dp: int = 1
    ep: bool = False

    @property
    def ep_link(self) -> Link:
        return self.hw.ep_link or self.hw.tp_link

    def _weight_read(self, tokens: float) -> float:
        """Weight bytes one GPU reads for a micro-batch of `tokens` on each engine."""
        work, tp, dp = self.work, self.tp, self.dp
        if dp == 1:
            return _touched_weight_bytes(work, tokens) * self.share / tp
        rest = (work.arch.parameters - work.arch.routed_expert_parameters) * work.bytes_per_weight
        split = _touched_weight_bytes(work, tokens * dp) / (tp * dp)
        return (split + rest * (1 / tp - 1 / (tp * dp))) * self.share

    def _moe_comm_s(self, layers: int, tokens: float) -> float:
        """The MoE layers' collectives for EP or DP layouts (TP x PP layouts: the second
        all-reduce per layer, as before)."""
        arch, tp, dp = self.work.arch, self.tp, self.dp
        message = tokens * arch.hidden_size * ACTIVATION_BYTES
        if self.ep:
            ep = tp * dp
            link = self.ep_link
            sent = message * min(max(arch.experts_per_token, 1), ep) / tp * (ep - 1) / ep
            one = sent / (link.gbps * 1e9 * LINK_EFFICIENCY) + link.alpha_s + link.beta_s * (ep - 1)
            return layers * 2 * one
        if dp > 1:
            return layers * self.ep_link.all_reduce_s(tp * dp, message * dp)
        return layers * self.hw.tp_link.all_reduce_s(tp, message)

    def expert_width(self) -> float:
        """Columns of one expert's up-projection on one GPU (0: experts unknown)."""
        arch = self.work.arch
        if arch.experts <= 0:
            return 0.0
        inner = arch.routed_expert_parameters / (arch.layers * arch.experts * 3 * arch.hidden_size)
        return inner if self.ep else inner / (self.tp * self.dp)

    @property
    def share(self) -> float:
        return memory.stage_share(self.work.arch.layers, self.pp)

    def peak_flops(self) -> float:
        fam = self.eff.family(self.hw.family)
        fp8 = self.work.fp8_compute and self.hw.fp8_tflops > 0
        return (self.hw.fp8_tflops if fp8 else self.hw.bf16_tflops) * 1e12 * fam.compute

    def stage_s(self, decode: float, prefill: float, context: float, prompt: float) -> float:
        """One stage, one micro-batch: `decode` sequences at `context` tokens of history plus
        `prefill` prompt tokens of prompts `prompt` tokens long."""
        arch, tp, share = self.work.arch, self.tp, self.share
        fam = self.eff.family(self.hw.family)
        if self.dp > 1 and decode > 0:
            # Lock-step engines wait for the busiest: sequences land on ranks unevenly, about one
            # standard deviation (Poisson) above the mean, never more than all of them.
            decode = min(decode * self.dp, decode + math.sqrt(decode))
        tokens = decode + prefill
        layers = math.ceil(arch.layers / self.pp)
        attention = 4 * layers * arch.attention_heads * arch.head_dim / tp
        # The routed experts' FLOPs run as grouped GEMMs as wide as one GPU's slice of an expert:
        # tensor parallelism cuts DeepSeek-V3's 2,048-wide experts to 256 columns on TP8, too
        # narrow to keep the tensor cores busy; EP keeps every expert whole on its GPU. Below the
        # fitted width (eff.moe_width) they run at that fraction of the dense rate.
        routed = _active_routed(arch)
        width = self.expert_width()
        moe_share = min(1.0, width / self.eff.moe_width) if self.eff.moe_width > 0 < width else 1.0
        flops = 2 * (arch.active_parameters - routed) * tokens * share / tp
        flops += attention * (decode * context + prefill * prompt / 2)
        expert_flops = 2 * routed * tokens * share / tp
        kv_per_token = (
            arch.kv_elements_per_token() * self.work.kv_bytes_per_element * share
            / min(tp, arch.kv_heads)
        )
        read = self._weight_read(tokens)
        read += (decode * context + prefill) * kv_per_token
        compute_s = (flops + expert_flops / moe_share) / self.peak_flops()
        memory_s = read / (self.hw.memory_bandwidth_gbps * 1e9 * fam.memory)
        fixed = self.eff.layer_overhead_s + (self.eff.moe_layer_overhead_s if arch.is_moe else 0)
        message = tokens * arch.hidden_size * ACTIVATION_BYTES
        comm = layers * self.hw.tp_link.all_reduce_s(tp, message) + self._moe_comm_s(layers, tokens)
        # Compute and memory traffic overlap only partly within a step (decode GEMVs and prefill
        # GEMMs run as separate kernels): the smaller one adds its `overlap` share.
        roofline = max(compute_s, memory_s) + self.eff.overlap * min(compute_s, memory_s)
        return roofline + layers * fixed + comm

    def step_s(
        self, running: float, prefill: float, context: float, prompt: float, *, chunk: bool = False
    ) -> float:
        """One engine step: every micro-batch through every stage, hops, scheduler overhead.

        Prompt tokens spread over the PP micro-batches on average; one request's `chunk` does not:
        it rides one micro-batch through every stage in turn."""
        pp = self.pp
        per_batch = prefill if chunk else prefill / pp
        stage = self.stage_s(running / pp, per_batch, context, prompt)
        hops = _hops_s(self.hw, pp, (running / pp + per_batch) * self.work.arch.hidden_size * 2)
        sync = self.ep_link.alpha_s if self.dp > 1 else 0.0  # the DP coordinator's step barrier
        return pp * stage + hops + sync + self.eff.step_overhead_s


@dataclass(frozen=True)
class _Steady:
    running: float
    itl_s: float
    prefill_s: float  # TTFT without queueing
    request_s: float  # prefill + decoding, in the engine
    tokens_per_s: float


def _capacity(work: Workload) -> float:
    """Sequences the engine runs at once: max-num-seqs, bounded by the KV cache."""
    cap = float(work.max_concurrency)
    if work.kv_capacity_tokens is not None:
        # Whole sequences: one that does not fit waits (vLLM preempts rather than run it short).
        per_sequence = work.prompt_tokens + work.output_tokens
        cap = min(cap, max(1.0, math.floor(work.kv_capacity_tokens / per_sequence)))
    return cap


def _mean_step(
    engine: _Engine, decodes: float, prefill: float, context: float, prompt: float, lump: float
) -> float:
    """Mean step time when the steps carry `prefill` prompt tokens on average beside `decodes`.

    Prompt tokens come in lumps (a request's chunk): when there are fewer than one lump per step,
    a share `prefill / lump` of the steps carries one and the rest decode alone; each chunk's time
    is added to the decode steps it shares (the step is not the mean-field step of a fractional
    chunk: a long prompt's chunk stalls the decodes of that step whole)."""
    if prefill <= 0 or lump <= 0:
        return engine.step_s(decodes, 0.0, context, prompt)
    share = min(1.0, prefill / lump)
    if share >= 1.0:
        return engine.step_s(decodes, prefill, context, prompt)
    with_chunk = engine.step_s(decodes, lump, context, prompt)
    return share * with_chunk + (1 - share) * engine.step_s(decodes, 0.0, context, prompt)


def _steady(engine: _Engine, running: float) -> _Steady:
    work = engine.work
    prompt, output = float(work.prompt_tokens), float(max(work.output_tokens, 1))
    budget = float(work.batched_tokens)
    room = max(budget - running, budget / 4)  # prefill tokens a step can take beside decodes
    chunks = math.ceil(prompt / room)
    life = max(output, running * prompt / room) + chunks - 1  # steps a request spends running
    context = prompt + output / 2
    chunk = min(prompt, room)
    # A decoding sequence's steps carry the other sequences' prompts (its own is done); the
    # engine's time over a request's life carries every running sequence's.
    step = _mean_step(engine, running, (running - 1) * prompt / life, context, prompt, chunk)
    cycle = _mean_step(engine, running, running * prompt / life, context, prompt, chunk)
    busy = running > 1
    # Each of this request's chunks rides a step with the other running sequences' decodes.
    chunk_step = engine.step_s(running - 1 if busy else 0.0, chunk, context, prompt, chunk=True)
    prefill = chunks * chunk_step + (step / 2 if busy else 0.0)
    request = prefill + (output - 1) * step
    # Prompts also queue behind each other for the prefill budget: an M/D/1 wait on the prefill
    # work, arriving at R / request time (vLLM admits prompts first come, first served).
    alone = chunks * engine.step_s(0.0, chunk, prompt, prompt, chunk=True)
    busy_share = min(0.95, running / request * alone) if busy else 0.0
    prefill += busy_share / (2 * (1 - busy_share)) * alone
    # The engine's fixed per-request cost (HTTP, template, tokenizer, first scheduling) plus a wait
    # for the API server: its CPU streams every other sequence's token each step (stream overhead
    # per sequence and step; one API server fronts every DP rank). A new request queues behind
    # that work as far as it fills the step (its utilization, work / step): all of it once the
    # CPU is the bottleneck (a 0.5B model on an L4 steps in milliseconds), little of it when the
    # steps are long (a 70B model's 20 ms steps at 4 req/s; issue 38: low-load TTFT was 3-5x over).
    others = engine.eff.stream_overhead_s * max(running * engine.dp - 1, 0.0)
    cpu = min(1.0, others / step) if step > 0 else 0.0
    overhead = engine.eff.request_overhead_s + others * cpu
    return _Steady(
        running=running,
        itl_s=step,
        prefill_s=prefill + overhead,
        request_s=prefill + overhead + (output - 1) * step,
        tokens_per_s=running * output / (life * cycle),
    )


def _active_routed(arch: models.ModelArch) -> float:
    """Routed-expert parameters one token uses (active less attention, shared experts, embeddings)."""
    if not arch.is_moe:
        return 0.0
    rest = arch.parameters - arch.routed_expert_parameters
    return max(0.0, arch.active_parameters - rest)


def _floor_bytes(work: Workload, dp: int) -> float:
    """Active weight bytes one TP group reads per token: the active experts spread over DP."""
    arch = work.arch
    if dp == 1:
        return arch.active_parameters * work.bytes_per_weight
    rest = arch.parameters - arch.routed_expert_parameters
    active_routed = max(0.0, arch.active_parameters - rest)
    return (min(rest, arch.active_parameters) + active_routed / dp) * work.bytes_per_weight


def _sakasegawa_wait(utilization: float, servers: float, service_s: float) -> float:
    """Mean queue wait of an M/M/c queue (Sakasegawa 1977), c = `servers`."""
    exponent = math.sqrt(2 * (servers + 1)) - 1
    return utilization**exponent / (servers * (1 - utilization)) * service_s


def predict(
    work: Workload,
    hw: Hardware,
    tp: int,
    pp: int,
    eff: efficiency.Efficiency | None = None,
    *,
    dp: int = 1,
    ep: bool = False,
) -> Prediction:
    whole = work
    if dp > 1:
        # One DP engine's share of the load; the replica is DP such engines in lock-step.
        work = dataclasses.replace(
            work,
            max_concurrency=memory.rank_sequences(work.max_concurrency, dp),
            concurrency=(work.concurrency or work.max_concurrency) / dp,  # type: ignore[arg-type]
            request_rate=work.request_rate / dp if work.request_rate is not None else None,
            kv_capacity_tokens=(
                work.kv_capacity_tokens / dp if work.kv_capacity_tokens is not None else None
            ),
        )
    engine = _Engine(work, hw, tp, pp, eff or efficiency.fitted(), dp=dp, ep=ep)
    cap = _capacity(work)
    saturated = False
    rate = work.request_rate
    if work.burst:
        # All at once: at full admission (as many sequences as max-num-seqs and the KV cache
        # hold) the engine completes mu requests/s; the burst's requests also queue for a serial
        # intake (API server and engine core CPU: parse, template, tokenize, schedule) that does
        # not overlap the engine's work for them, so they flow at 1 / (intake + 1/mu). The engine
        # then runs the R that rate keeps in flight (Little's law), the rest wait.
        full = _steady(engine, cap)
        mu = full.tokens_per_s / max(work.output_tokens, 1)
        intake = engine.eff.intake_s if work.api_server else 0.0
        rate = 1.0 / (intake + 1.0 / mu)
    if rate is not None and rate > 0:
        full = _steady(engine, cap)
        if rate * full.request_s >= cap * _MAX_UTILIZATION:
            saturated = rate * full.request_s >= cap
            state, utilization = full, _MAX_UTILIZATION
        else:
            running = max(1.0, rate * full.request_s)
            for _ in range(20):  # Little's law fixed point: R = rate x request time(R)
                state = _steady(engine, running)
                following = min(cap, max(1.0, rate * state.request_s))
                if abs(following - running) <= 0.005 * running:
                    break
                running = following
            state = _steady(engine, running)
            utilization = min(_MAX_UTILIZATION, rate * state.request_s / cap)
        wait = _sakasegawa_wait(utilization, cap, state.request_s)
        tokens = min(state.tokens_per_s, rate * work.output_tokens)
    else:
        concurrency = float(work.concurrency or work.max_concurrency)
        state = _steady(engine, min(concurrency, cap))
        wait = max(0.0, concurrency / state.running - 1) * state.request_s
        tokens = state.tokens_per_s
    arch = work.arch
    floor = _floor_bytes(whole, dp) / (tp * hw.memory_bandwidth_gbps * 1e9)
    ceiling = dp * tp * pp * engine.peak_flops() / (2 * arch.active_parameters)
    return Prediction(
        itl_s=max(floor, state.itl_s),
        ttft_s=max(floor, state.prefill_s + wait),
        tokens_per_s=min(ceiling, tokens * dp),
        floor_s=floor,
        running=state.running * dp,
        saturated=saturated,
    )
