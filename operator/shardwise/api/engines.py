"""Which serving engine runs a deployment (spec.engine), its image, and what its extraArgs may hold.

vLLM keeps its own module (extra_args: spec.serving.extraArgs). SGLang and TensorRT-LLM arguments go
in lists of their own (serving.sglangExtraArgs, serving.trtllmExtraArgs), because the API server
checks each item with a CEL rule that sees only the item, never spec.engine: one list per engine lets
each item rule check the flags of the engine it is for. The per-engine rules here are the vLLM ones
in shape: flags shardwise sets itself (any spelling the engine's parser accepts), shell syntax,
several tokens in one item, --help, and flags the pinned engine version does not have.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from enum import Enum

from shardwise.api import checks, engine_flags


class Engine(str, Enum):
    vllm = "vllm"
    sglang = "sglang"
    trtllm = "trtllm"


# Default images, one per engine; the operator's settings (chart values engines.<name>.image)
# override them. The vLLM default stays spec.serving.image's schema default (v1alpha1.DEFAULT_IMAGE).
SGLANG_IMAGE = "lmsysorg/sglang:v0.5.23"
TRTLLM_IMAGE = "nvcr.io/nvidia/tensorrt-llm/release:1.0.0"
VERSIONS = {Engine.vllm: "vLLM 0.32", Engine.sglang: "SGLang 0.5.23", Engine.trtllm: "TensorRT-LLM 1.0"}

NUMBER = r"-[0-9.][0-9.eE+-]*"


def is_flag(item: str) -> bool:
    return item.startswith("-") and re.fullmatch(NUMBER, item) is None


class EngineArgs:
    """The checks on one engine's extraArgs list: `item_checks` (CEL on each item and pydantic) and
    `list_problem` (the models only: a value needs the flag before it)."""

    def __init__(self, *, field: str, program: str, known: Callable[[], dict[str, dict[str, str]]],
                 owned: Sequence[str], owned_words: str, abbreviations: bool) -> None:
        self.field = field
        self.program = program
        self.known = known
        self.abbreviations = abbreviations
        flags = known()
        spellings = sorted({s for o in owned for s in engine_flags.spellings_of(flags, flags[o]["canonical"])})
        self.owned = tuple(spellings)
        self.owned_message = (f"{field} may not set a flag shardwise sets itself ({owned_words}), in any spelling; "
                              "use the matching spec fields instead")
        self.item_checks = self._build_checks()

    def flag_of(self, item: str) -> str:
        return item.split("=")[0]

    def is_owned(self, item: str) -> bool:
        flag = item.strip().split(" ")[0].split("=")[0]
        if self.abbreviations and flag.startswith("--") and len(flag) > 3:
            # argparse takes an unambiguous prefix: `--tp-si 4` is --tp-size.
            return any(o.startswith(flag) for o in self.owned)
        return flag in self.owned

    def _owned_cel(self) -> str:
        flag = "self.trim().split(' ')[0].split('=')[0]"
        if self.abbreviations:
            return (f"[{flag}].all(f, (f.startsWith('--') && f.size() > 3) ? "
                    f"{list(self.owned)}.exists(o, o.startsWith(f)) : f in {list(self.owned)})")
        return f"{flag} in {list(self.owned)}"

    def _build_checks(self) -> tuple[checks.Check, ...]:
        field, program = self.field, self.program
        quoted_cel = f"'{field} item \\'' + self + '\\' '"
        shell = (f"is shell syntax, but no shell runs {field}: each item is one argument of `{program}`; keep only "
                 "its flags and their values")
        several = (f"holds several arguments; {field} takes one per item: write each flag and each value as an "
                   "item of its own (\"--flag\", \"value\") or as --flag=value")
        leading = f"starts with whitespace, which makes it a value, not a flag: remove it ({field} items are passed as they are)"
        help_text = f"makes {program} print its help and exit instead of serving: remove it from {field}"
        unknown = f"is not a flag of `{program}` (flags are exact, no abbreviations)"
        known = sorted(self.known())
        known_cel = (f"!self.startsWith('-') || self.matches({checks.cel_string(checks.anchored(NUMBER))}) || "
                     f"self.split('=')[0] in {known}")

        def describe(message: str) -> Callable[[str], str]:
            return lambda item: f"{field} item '{item}' {message}"

        def closest(item: str) -> str:
            near = difflib.get_close_matches(self.flag_of(item), known, n=1)
            return f"; did you mean {near[0]}?" if near else ""

        return (
            checks.Check(message=self.owned_message, predicate=self.is_owned, predicate_cel=self._owned_cel()),
            checks.Check(bad=rf"^{checks.WHITESPACE}+-", message=f"a {field} item {leading}",
                         describe=describe(leading), message_cel=f"{quoted_cel} + {checks.cel_string(leading)}"),
            checks.Check(bad_whole=r"&&|\|\||;|\||&|>|>>|<|2>&1|sh|bash|zsh|/bin/sh|/bin/bash|/bin/zsh|-c|\$\(.*\)|`.*`",
                         message=f"a {field} item {shell}", describe=describe(shell),
                         message_cel=f"{quoted_cel} + {checks.cel_string(shell)}"),
            checks.Check(bad=rf"^-[^=]*{checks.WHITESPACE}", message=f"a {field} item {several}",
                         describe=describe(several), message_cel=f"{quoted_cel} + {checks.cel_string(several)}"),
            checks.Check(bad_whole=r"(?:-h|--help)(?:=.*)?", message=f"a {field} item {help_text}",
                         describe=describe(help_text), message_cel=f"{quoted_cel} + {checks.cel_string(help_text)}"),
            checks.Check(message=f"a {field} item {unknown}",
                         predicate=lambda item: is_flag(item) and self.flag_of(item) not in self.known(),
                         predicate_cel=f"!({known_cel})",
                         describe=lambda item: f"{field} item '{item}' {unknown}{closest(item)}",
                         message_cel=f"{quoted_cel} + {checks.cel_string(unknown)}"),
        )

    def item_problem(self, item: str) -> str | None:
        return checks.first_problem(self.item_checks, item)

    def list_problem(self, items: Sequence[str]) -> str | None:
        """A value no flag takes, a flag without its value, a switch given a value."""
        owner: str | None = None
        wants, taken = "none", 0
        for index, item in enumerate(items):
            where = f"{self.field}[{index}] '{item}'"
            if not is_flag(item):
                if owner is None:
                    before = f"'{items[index - 1]}' takes no value" if index else "no flag comes before it"
                    return f"{where} is a value, but {before}: put each value right after the flag it belongs to"
                taken += 1
                if wants != "many":
                    owner = None
                continue
            if owner is not None and wants in ("one", "many") and taken == 0:
                return f"{self.field}: '{owner}' needs a value: put it in the item right after the flag"
            kind = "none" if "=" in item else self.known()[self.flag_of(item)]["value"]
            if "=" in item and self.known()[self.flag_of(item)]["value"] == "none":
                return f"{where}: {self.flag_of(item)} is a switch and takes no value: write it alone"
            wants, taken = kind, 0
            owner = item if wants != "none" else None
        if owner is not None and wants in ("one", "many") and taken == 0:
            return f"{self.field}: '{owner}' needs a value: add it as the next item"
        return None


SGLANG = EngineArgs(
    field="serving.sglangExtraArgs", program="python -m sglang.launch_server", known=engine_flags.sglang,
    # What render/sglang_args.py sets, the layout the plan owns, and what SGLang cannot do here yet
    # (LoRA and P/D are refused for sglang at admission, so their flags are too).
    owned=("--model-path", "--host", "--port", "--served-model-name", "--tp-size", "--pp-size", "--dp-size",
           "--attn-dp-size", "--ep-size", "--enable-dp-attention", "--mem-fraction-static", "--context-length",
           "--max-running-requests", "--nnodes", "--node-rank", "--dist-init-addr", "--dtype", "--quantization",
           "--enable-metrics", "--revision", "--enable-lora", "--lora-paths", "--max-loras-per-batch",
           "--max-lora-rank", "--disaggregation-mode", "--disaggregation-transfer-backend",
           "--disaggregation-bootstrap-port"),
    owned_words="--model-path, --host, --port, --served-model-name, the parallel sizes --tp-size, --pp-size, "
                "--dp-size, --attn-dp-size, --ep-size, --enable-dp-attention, --mem-fraction-static, "
                "--context-length, --max-running-requests, the multi-node flags --nnodes, --node-rank, "
                "--dist-init-addr, --dtype, --quantization, --enable-metrics, --revision, and the LoRA and "
                "disaggregation flags",
    abbreviations=True,
)

TRTLLM = EngineArgs(
    field="serving.trtllmExtraArgs", program="trtllm-serve", known=engine_flags.trtllm,
    owned=("--host", "--port", "--tensor_parallel_size", "--pipeline_parallel_size", "--moe_expert_parallel_size",
           "--context_parallel_size", "--max_batch_size", "--max_num_tokens", "--max_seq_len",
           "--free_gpu_memory_fraction", "--config", "--revision", "--backend", "--gpus_per_node", "--server_role",
           "--disagg_cluster_uri", "--metadata_server_config_file"),
    owned_words="--host, --port, the parallel sizes --tp_size, --pp_size, --ep_size, --cp_size, --max_batch_size, "
                "--max_num_tokens, --max_seq_len, --kv_cache_free_gpu_memory_fraction, --config/"
                "--extra_llm_api_options (shardwise renders the LLM API options file), --revision, --backend, "
                "--gpus_per_node, and the disaggregation flags",
    abbreviations=False,
)

# What an engine cannot do in this version of shardwise, refused at admission (never a silent
# fallback to vLLM or a pod that crash-loops).
LORA_MESSAGE = ("spec.adapters and spec.lora need engine vllm: shardwise loads LoRA adapters at runtime through "
                "vLLM's API only, and does not yet render SGLang's or TensorRT-LLM's LoRA flags")
DISAGGREGATION_MESSAGE = ("spec.disaggregation mode Disaggregated needs engine vllm: SGLang's and TensorRT-LLM's "
                          "prefill/decode servers and routers are not wired in this version of shardwise")
EXTRA_ARGS_MESSAGE = ("spec.serving.extraArgs holds vLLM flags and needs engine vllm; use serving.sglangExtraArgs "
                      "or serving.trtllmExtraArgs for the engine named in spec.engine")
SGLANG_ARGS_MESSAGE = "spec.serving.sglangExtraArgs needs spec.engine sglang"
TRTLLM_ARGS_MESSAGE = "spec.serving.trtllmExtraArgs needs spec.engine trtllm"
