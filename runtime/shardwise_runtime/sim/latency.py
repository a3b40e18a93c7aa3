"""The simulated engine's latency model: pure arithmetic, no clock.

The operator predicts a TTFT and an inter-token latency (ITL) for a pod's plan and GPU. A real
engine deviates from those in two ways that matter for autoscaling, and this model has both:

* Batching: vLLM runs all admitted requests in one batch, so each decode step, and the prefill
  squeezed between steps, gets slower as the batch grows. Here both scale by
  `1 + batch_slowdown * (running - 1) / (max_concurrency - 1)`: a full batch is
  `1 + batch_slowdown` times slower than a lone request.
* Queueing: at most `max_concurrency` requests run; the rest wait (vllm:num_requests_waiting) and
  that wait is part of TTFT. The wait is not computed here: the engine really holds the request
  back until a slot frees, so it emerges from arrivals and service times like an M/G/c queue.

Prefill cost grows with the prompt: `prompt_fixed_fraction` of the predicted TTFT is fixed
(scheduling, the first decode step), the rest scales linearly with prompt length relative to
`reference_prompt_tokens`, the prompt size the prediction is for.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class LatencyModel:
    """Service times of one engine as a function of its running batch size."""

    ttft_s: float
    itl_s: float
    max_concurrency: int
    reference_prompt_tokens: int = 512
    prompt_fixed_fraction: float = 0.5
    batch_slowdown: float = 1.0

    def __post_init__(self) -> None:
        if self.ttft_s < 0 or self.itl_s < 0:
            raise ValueError("latencies must not be negative")
        if self.max_concurrency < 1 or self.reference_prompt_tokens < 1:
            raise ValueError("max_concurrency and reference_prompt_tokens must be >= 1")
        if not 0.0 <= self.prompt_fixed_fraction <= 1.0 or self.batch_slowdown < 0:
            raise ValueError("prompt_fixed_fraction must be in [0, 1], batch_slowdown >= 0")

    def batch_factor(self, running: int) -> float:
        """Slowdown of one engine step with `running` requests in the batch (1.0 when alone)."""
        if self.max_concurrency == 1:
            return 1.0
        busy = min(max(running, 1), self.max_concurrency) - 1
        return 1.0 + self.batch_slowdown * busy / (self.max_concurrency - 1)

    def prefill_s(self, prompt_tokens: int, running: int) -> float:
        """Time from admission to the first token (TTFT without queue wait)."""
        share = prompt_tokens / self.reference_prompt_tokens
        scale = self.prompt_fixed_fraction + (1.0 - self.prompt_fixed_fraction) * share
        return self.ttft_s * scale * self.batch_factor(running)

    def itl(self, running: int) -> float:
        """Time between two output tokens of one request while `running` requests decode."""
        return self.itl_s * self.batch_factor(running)

    def ttft(self, prompt_tokens: int, running: int, queue_wait_s: float = 0.0) -> float:
        """Time to first token as vLLM measures it: from arrival, so including the queue wait."""
        return queue_wait_s + self.prefill_s(prompt_tokens, running)
