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
            "such request: lower workload.promptTokens or workload.outputTokens, or raise serving.maxModelLen "
            "to at least that")


# The largest number the sentence shows: both token counts at their bound (10,485,760) added up.
_MAX_DIGITS = 8
_DIGITS = "[" + ",".join(f"'{d}'" for d in range(10)) + "]"


def _cel_decimal(expr: str) -> str:
    """`expr` (a non-negative int below 10^8) in decimal, without CEL's string(int).

    The API server sizes string(int) as unbounded, so a message built from it is refused as too
    costly (by 100x); digits picked from a literal list have a known size."""
    terms = [f"({expr} >= {10**k} ? {_DIGITS}[{expr} / {10**k} % 10] : '')" for k in range(_MAX_DIGITS - 1, 0, -1)]
    return "(" + " + ".join([*terms, f"{_DIGITS}[{expr} % 10]"]) + ")"


_PROMPT = f"(has(self.workload.promptTokens) ? self.workload.promptTokens : {DEFAULT_PROMPT_TOKENS})"
_OUTPUT = f"(has(self.workload.outputTokens) ? self.workload.outputTokens : {DEFAULT_OUTPUT_TOKENS})"


def _cel_message() -> str:
    """`context_problem`'s sentence as a CEL messageExpression (the same words, the object's numbers)."""
    parts = ["'spec.workload: a request of '", _cel_decimal(_PROMPT), "' prompt + '", _cel_decimal(_OUTPUT),
             "' output tokens needs '", _cel_decimal(f"({_PROMPT} + {_OUTPUT})"),
             "' tokens of context; serving.maxModelLen is '", _cel_decimal("self.serving.maxModelLen"),
             checks.cel_string(", so vLLM would refuse every such request: lower workload.promptTokens or "
                               "workload.outputTokens, or raise serving.maxModelLen to at least that")]
    return " + ".join(parts)


# On the spec, where both sections are. Only a workload the spec declares (either token count set;
# the CRD writes no defaults for them) must fit: the defaults are the planner's guess, and a small
# maxModelLen with no workload (a CPU test engine at 512 tokens) is no mistake of the user's. The
# API server fills maxModelLen's default (8192) before it runs the rule.
CEL_RULE: dict[str, Any] = {
    "rule": "!has(self.workload) || !has(self.serving) || !has(self.serving.maxModelLen) || "
            "(!has(self.workload.promptTokens) && !has(self.workload.outputTokens)) || "
            f"{_PROMPT} + {_OUTPUT} <= self.serving.maxModelLen",
    "messageExpression": _cel_message(),
    "message": "spec.workload: promptTokens + outputTokens exceeds serving.maxModelLen, so vLLM would refuse "
               "every such request",
    "fieldPath": ".workload",
}
