"""The command-line flags of the engines beyond vLLM, as shardwise pins them, and what each expects.

Why here, in the API package: spec.serving.sglangExtraArgs and trtllmExtraArgs are checked against
these flags at admission (CEL generated into the CRD) and by the models, and the renderers' own
flags are checked against them by unit tests, as vLLM's are against vllm_flags.json.

- `sglang_flags.json` is `vllm_flags.parse_help` (it reads any argparse help) of SGLang 0.5.23's
  `python -m sglang.launch_server --help` (tests/fixtures/sglang-0.5.23/serve-help.txt, captured on
  a CPU machine from the PyPI package). Regenerate with
  `.venv/bin/python -m shardwise.api.engine_flags < tests/fixtures/sglang-0.5.23/serve-help.txt`.
- `trtllm_flags.json` is written by hand from the `@click.option`s of `trtllm-serve`'s `serve`
  command and the `LlmArgs` keys shardwise renders, with the source it was read from in its
  "source" key (TensorRT-LLM's PyPI wheels download from NVIDIA's index, which this machine cannot
  reach, so its own parser cannot run here).

Each flag maps to {"canonical", "value"} as in vllm_flags: value is "none" (a switch), "one",
"optional" or "many". SGLang's parser is plain argparse: it accepts unambiguous prefixes but does
not read `_` as `-`. trtllm-serve's is click: exact spellings only, underscores as written.
"""

from __future__ import annotations

import functools
import json
import sys
from importlib import resources
from typing import Any

from shardwise.api import vllm_flags


@functools.cache
def _document(name: str) -> dict[str, Any]:
    return json.loads(resources.files("shardwise.api").joinpath(name).read_text())  # type: ignore[no-any-return]


def sglang() -> dict[str, dict[str, str]]:
    """Every spelling SGLang 0.5.23's `launch_server` accepts -> canonical, value kind."""
    return _document("sglang_flags.json")["flags"]  # type: ignore[no-any-return]


def trtllm() -> dict[str, dict[str, str]]:
    """Every spelling `trtllm-serve` (the pinned source) accepts -> canonical, value kind."""
    return _document("trtllm_flags.json")["flags"]  # type: ignore[no-any-return]


def trtllm_llm_api_keys() -> dict[str, Any]:
    """The LLM API options (YAML) keys shardwise may render, nested as the YAML nests them."""
    return _document("trtllm_flags.json")["llmApiKeys"]  # type: ignore[no-any-return]


def source(engine: str) -> str:
    return str(_document(f"{engine}_flags.json")["source"])


def spellings_of(flags: dict[str, dict[str, str]], canonical: str) -> list[str]:
    return sorted(name for name, info in flags.items() if info["canonical"] == canonical)


def main() -> None:
    """Write sglang_flags.json for the SGLang help text on stdin."""
    path = resources.files("shardwise.api").joinpath("sglang_flags.json")
    document = {"source": "sglang 0.5.23 `python -m sglang.launch_server --help` "
                          "(tests/fixtures/sglang-0.5.23/serve-help.txt)",
                "flags": vllm_flags.parse_help(sys.stdin.read())}
    with resources.as_file(path) as target:
        target.write_text(json.dumps(document, indent=1) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
