"""Run with the REAL vLLM's Python (hack/install-vllm.sh): parse `vllm serve` argument lists with
vLLM's own CLI parser and validation, and turn each into engine arguments, starting nothing.

Reads a JSON list of argument lists (what follows `vllm serve`) on stdin; prints a JSON list of
{"ok": bool, "error": str} in the same order. Used by tests/e2e/test_real_engine_flags.py.
"""

import argparse
import contextlib
import io
import json
import sys


def main() -> None:
    import vllm.entrypoints.cli.serve as serve
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    [command] = serve.cmd_init()
    results = []
    for argv in json.load(sys.stdin):
        parser = FlexibleArgumentParser(prog="vllm")
        subparsers = parser.add_subparsers(dest="subparser")
        command.subparser_init(subparsers)
        errors = io.StringIO()
        try:
            with contextlib.redirect_stderr(errors):
                args = parser.parse_args(["serve", *argv])
            if getattr(args, "model_tag", None) is not None:
                args.model = args.model_tag  # as `vllm serve` itself does with the positional model
            command.validate(args)
            AsyncEngineArgs.from_cli_args(args)
            results.append({"ok": True, "error": ""})
        except SystemExit:
            results.append({"ok": False, "error": errors.getvalue().strip()[-500:]})
        except (ValueError, TypeError, argparse.ArgumentError) as error:
            results.append({"ok": False, "error": f"{type(error).__name__}: {error}"})
    print(json.dumps(results))


if __name__ == "__main__":
    main()
