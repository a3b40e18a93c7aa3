"""Does the declared workload fit the context one request may use? Written once, run three times.

vLLM refuses a request whose prompt plus max_tokens exceeds --max-model-len, so a workload of
16,000 prompt + 2,000 output tokens on maxModelLen 8192 describes requests that can never be
served, and predictions for it (TTFT, tokens/s, KV use) would be for traffic that cannot happen.
Both numbers are in the spec, so the API server refuses such an object (the CEL rule below, on the
spec); the pydantic model says the same sentence for files read offline and for objects stored
before the rule existed (the operator then reports InvalidSpec with it), and the planner refuses
to predict for it (`shardwise plan -f`). Only a declared workload is held to it (see CEL_RULE).
"""

from __future__ import annotations

from typing import Any

from shardwise.api import checks

# What the planner assumes when spec.workload leaves the request shape out.
DEFAULT_PROMPT_TOKENS = 1024
DEFAULT_OUTPUT_TOKENS = 256

def context_problem(prompt_tokens: int, output_tokens: int, max_model_len: int) -> str | None:
    """The sentence that says why the workload cannot be served, with its numbers; None when it fits."""
    needed = prompt_tokens + output_tokens
    if needed <= max_model_len:
        return None
    return (f"spec.workload: a request of {prompt_tokens} prompt + {output_tokens} output tokens needs "
            f"{needed} tokens of context; serving.maxModelLen is {max_model_len}, so vLLM would refuse every "
            f"such request: lower workload.promptTokens or workload.outputTokens, or raise serving.maxModelLen "
            f"to at least {needed}")


def _cel_message() -> str:
    """`context_problem`'s sentence as a CEL messageExpression (the same words, the object's numbers)."""
    prompt = f"(has(self.workload.promptTokens) ? self.workload.promptTokens : {DEFAULT_PROMPT_TOKENS})"
    output = f"(has(self.workload.outputTokens) ? self.workload.outputTokens : {DEFAULT_OUTPUT_TOKENS})"
    limit = "self.serving.maxModelLen"
    parts = ["spec.workload: a request of ", f"string({prompt})", " prompt + ", f"string({output})",
             " output tokens needs ", f"string({prompt} + {output})", " tokens of context; serving.maxModelLen is ",
             f"string({limit})", ", so vLLM would refuse every such request: lower workload.promptTokens or "
             "workload.outputTokens, or raise serving.maxModelLen to at least ", f"string({prompt} + {output})"]
    return " + ".join(p if p.startswith("string(") else checks.cel_string(p) for p in parts)


# On the spec, where both sections are. Only a workload the spec declares (either token count set;
# the CRD writes no defaults for them) must fit: the defaults are the planner's guess, and a small
# maxModelLen with no workload (a CPU test engine at 512 tokens) is no mistake of the user's. The
# API server fills maxModelLen's default (8192) before it runs the rule.
CEL_RULE: dict[str, Any] = {
    "rule": "!has(self.workload) || !has(self.serving) || !has(self.serving.maxModelLen) || "
            "(!has(self.workload.promptTokens) && !has(self.workload.outputTokens)) || "
            f"(has(self.workload.promptTokens) ? self.workload.promptTokens : {DEFAULT_PROMPT_TOKENS}) + "
            f"(has(self.workload.outputTokens) ? self.workload.outputTokens : {DEFAULT_OUTPUT_TOKENS}) "
            "<= self.serving.maxModelLen",
    "messageExpression": _cel_message(),
    "message": "spec.workload: promptTokens + outputTokens exceeds serving.maxModelLen, so vLLM would refuse "
               "every such request",
    "fieldPath": ".workload",
}
