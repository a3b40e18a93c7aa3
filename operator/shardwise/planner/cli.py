"""`shardwise plan`: the planner offline, on an InferenceDeployment and a nodes file or a cluster.

Contract (other tools depend on it): `-o json` prints exactly `Plan.to_dict()` (plus `architecture`
for a model read from its config.json, below); exit 0 when the plan
is feasible, 2 when it is not (the JSON is still printed), 1 on bad input with a one-line error
naming the field. The nodes file is what `kubectl get nodes -o yaml` prints; a List from
`kubectl get nodes,pods -A -o yaml` also works, and its running pods' GPUs then count as taken.
`--cluster` reads nodes and pods from the current kubeconfig: the only place the planner package
touches the Kubernetes client, imported lazily so the pure planner never loads it.

A model the catalog lacks, with no spec.model.architecture, is planned from its own config.json:
from `--model-config DIR_OR_FILE`, else from the hub (HF_ENDPOINT, HF_TOKEN) at spec.model.revision,
through shardwise.hub (also imported lazily). The architecture used and its source are then printed
(MODEL line) and added to the JSON as `architecture`; an unreadable repo exits 1 with the hub's
answer.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from shardwise import planner, pricing
from shardwise.planner import corrections, engine_choice, engines, hfconfig, models, plans
from shardwise.planner import request as plan_request

_BAND_NAMES = {"ttftMs": "TTFT", "itlMs": "ITL", "tokensPerSecond": "tokens/s"}
EXIT_FEASIBLE = 0
EXIT_BAD_INPUT = 1
EXIT_INFEASIBLE = 2


class _InputError(Exception):
    """A problem with a file or argument, reported on one line."""


def register(subparsers: Any) -> None:
    """Add the `plan` subcommand to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "plan",
        help="plan TP/PP for an InferenceDeployment on a set of nodes",
        description="Plan tensor/pipeline parallelism for an InferenceDeployment, offline.",
    )
    parser.add_argument("-f", "--filename", required=True, help="InferenceDeployment YAML")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--nodes", help="nodes as printed by `kubectl get nodes -o yaml`")
    source.add_argument(
        "--cluster", action="store_true", help="read nodes and pods of the current kubeconfig"
    )
    parser.add_argument(
        "--prices", help="YAML map of GPU product to USD per GPU-hour (cluster pricing table)"
    )
    parser.add_argument(
        "--model-config",
        help="a model's config.json, or its folder (with model.safetensors.index.json): for models "
        "the catalog lacks; without it they are read from the hub (HF_ENDPOINT, HF_TOKEN)",
    )
    parser.add_argument("-o", "--output", choices=("json", "table"), default="table")
    parser.add_argument(
        "--engine",
        help="plan for these engines instead of spec.engine: one (vllm, sglang, trtllm), a comma "
        "list, or all; with several, each engine's plan side by side and which wins the objective",
    )
    workload = parser.add_argument_group(
        "workload", "override spec.workload: the traffic the predictions are for"
    )
    workload.add_argument("--prompt-tokens", type=int, help="typical prompt length in tokens")
    workload.add_argument("--output-tokens", type=int, help="typical output length in tokens")
    workload.add_argument("--concurrency", type=int, help="requests in flight per replica")
    workload.add_argument(
        "--requests-per-second", type=float, help="request rate per replica (open loop)"
    )
    parser.add_argument(
        "--operator-namespace",
        default="shardwise-system",
        help="with --cluster: where the operator keeps its learned corrections ConfigMap",
    )
    parser.set_defaults(func=run)


def _load_yaml(path: str, what: str) -> list[Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            return [doc for doc in yaml.safe_load_all(handle) if doc is not None]
    except OSError as error:
        raise _InputError(f"{what}: cannot read {path}: {error.strerror}") from None
    except yaml.YAMLError as error:
        raise _InputError(
            f"{what}: {path} is not valid YAML: {str(error).splitlines()[0]}"
        ) from None


def _deployment_spec(path: str) -> Mapping[str, Any]:
    docs = _load_yaml(path, "-f")
    for doc in docs:
        if (
            isinstance(doc, Mapping)
            and doc.get("kind", "InferenceDeployment") == "InferenceDeployment"
        ):
            spec = doc.get("spec")
            if not isinstance(spec, Mapping):
                raise planner.PlanInputError("spec", f"missing in {path}")
            return spec
    raise _InputError(f"-f: no InferenceDeployment in {path}")


def _objects(path: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    nodes: list[dict[str, Any]] = []
    pods: list[dict[str, Any]] = []
    for doc in _load_yaml(path, "--nodes"):
        items = doc.get("items") if isinstance(doc, Mapping) and "items" in doc else [doc]
        for item in items or []:
            if not isinstance(item, dict):
                raise _InputError(
                    f"--nodes: {path} holds something that is not a Kubernetes object"
                )
            kind = item.get("kind", "Node")
            if kind == "Node":
                nodes.append(item)
            elif kind == "Pod":
                pods.append(item)
    return nodes, pods


def _with_workload(spec: Mapping[str, Any], args: argparse.Namespace) -> Mapping[str, Any]:
    overrides = {
        field: value
        for field, value in (
            ("promptTokens", args.prompt_tokens),
            ("outputTokens", args.output_tokens),
            ("concurrency", args.concurrency),
            ("requestsPerSecond", args.requests_per_second),
        )
        if value is not None
    }
    if not overrides:
        return spec
    return {**spec, "workload": {**(spec.get("workload") or {}), **overrides}}


def _cluster_corrections(namespace: str) -> dict[str, plans.Correction]:
    """The operator's learned corrections (ConfigMap shardwise-corrections), if readable."""
    from kubernetes import client  # lazily, as in _cluster_objects

    try:
        cm = client.CoreV1Api().read_namespaced_config_map("shardwise-corrections", namespace)
    except client.ApiException as error:
        if error.status not in (403, 404):
            raise
        return {}
    text = (cm.data or {}).get("corrections.json")
    try:
        return corrections.from_table(json.loads(text)) if text else {}
    except ValueError:
        return {}


def _cluster_objects() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from kubernetes import client, config  # lazily: only --cluster needs a client

    # The client is untyped: its calls are opaque to mypy.
    config.load_kube_config()  # type: ignore[no-untyped-call]
    api = client.CoreV1Api()
    serialize = client.ApiClient().sanitize_for_serialization
    nodes: list[dict[str, Any]] = serialize(api.list_node().items)  # type: ignore[no-untyped-call]
    running = "status.phase!=Succeeded,status.phase!=Failed"
    pods: list[dict[str, Any]] = serialize(  # type: ignore[no-untyped-call]
        api.list_pod_for_all_namespaces(field_selector=running).items
    )
    return nodes, pods


def _prices(path: str | None) -> dict[str, float] | None:
    if path is None:
        return None
    docs = _load_yaml(path, "--prices")
    table = docs[0] if docs else {}
    if not isinstance(table, Mapping):
        raise _InputError(f"--prices: {path} must map GPU product to USD per GPU-hour")
    prices, problems = pricing.price_table(table)
    if problems:
        raise _InputError(f"--prices: {path}: {problems[0]}")
    return prices


def _resolved_architecture(
    spec: Mapping[str, Any], model_config: str | None
) -> models.ModelArch | None:
    """The model's architecture from its config.json when the catalog and the spec lack it."""
    model = spec.get("model")
    if not isinstance(model, Mapping):
        return None
    # A config handed over with --model-config is read even for a catalog model: it is the
    # checkpoint's own word on how its weights are stored.
    if not hfconfig.needs_config(model) and not model_config:
        return None
    from shardwise import hub  # lazily: only a model the catalog lacks needs the hub client

    files: hfconfig.RepoFiles
    if model_config:
        files = hub.FolderFiles(model_config)
    else:
        revision = model.get("revision")
        files = hub.HubFiles(str(model["name"]).strip(), revision=str(revision) if revision else None,
                             token=os.environ.get("HF_TOKEN") or None)
    # Either way the user can still give the numbers themselves: the message says how.
    fallback = (
        f"spec.model.architecture: model {str(model['name']).strip()!r} is not in the built-in "
        "catalog and its config.json could not be read"
    )
    advice = "set parameters, layers, hiddenSize, attentionHeads, or pass --model-config"
    try:
        return hfconfig.resolve_architecture(model, files, catalogued_too=bool(model_config))
    except hub.HubError as error:
        raise _InputError(f"{fallback} ({error.reason}: {error.message}); {advice}") from None
    except hfconfig.ConfigError as error:
        raise _InputError(f"{fallback} ({files.where}: {error}); {advice}") from None


def _weights_lines(result: plans.Plan) -> list[str]:
    """WEIGHTS: the format vLLM loads and the GiB it counts; a dtype it will not honour, said."""
    weights = result.weights or {}
    loaded, stored = weights.get("format"), weights.get("storedFormat")
    how = "as stored" if loaded == stored else (f"stored {stored}" if stored else "stored format unknown")
    flag = f", --quantization {weights['quantization']}" if weights.get("quantization") else ""
    line = f"WEIGHTS      {plan_request.format_words(str(loaded))} ({how}{flag})"
    fit = result.memory
    if fit is not None and result.tensor_parallel:
        # The model once: under DP every rank holds its own attention weights, so not per GPU x TP.
        total = fit.model_weights_gib or fit.weights_gib * result.tensor_parallel
        line += f", {fit.weights_gib:.1f} GiB per GPU"
        if (result.pipeline_parallel or 1) == 1:
            line += f", {total:.1f} GiB in all"
    lines = [line]
    if weights.get("dtypeIgnored"):
        lines.extend(textwrap.wrap(f"WARNING: {weights['dtypeIgnored']}", 100,
                                   initial_indent=" " * 13, subsequent_indent=" " * 13))
    return lines


def _table(result: plans.Plan, arch: models.ModelArch | None = None) -> str:
    lines = [f"FEASIBLE     {'yes' if result.feasible else 'no'} ({result.reason_code})",
             f"ENGINE       {engines.LABELS.get(result.engine, result.engine)}"]
    if arch is not None:
        lines.extend(
            textwrap.wrap(
                f"{arch.layers} layers, hidden {arch.hidden_size}, {arch.attention_heads} heads "
                f"({arch.kv_heads} KV, dim {arch.head_dim}), {arch.parameters / 1e9:.2f}B "
                f"parameters ({arch.active_parameters / 1e9:.2f}B active): {arch.source}",
                100, initial_indent="MODEL        ", subsequent_indent=" " * 13,
            )
        )
    if result.weights:
        lines.extend(_weights_lines(result))
    if result.tensor_parallel:
        label = result.layout or f"TP{result.tensor_parallel}xPP{result.pipeline_parallel}"
        lines.append(
            f"LAYOUT       {label.replace('x', ' x ')}: "
            f"{result.gpus_per_replica} GPUs on {result.nodes_per_replica} node(s), "
            f"{result.gpus_per_node} per pod, {result.gpu_product} ({result.interconnect})"
        )
    if result.predicted:
        p = result.predicted
        lines.append(
            f"PREDICTED    ITL {p.itl_ms:.1f} ms, TTFT {p.ttft_ms:.0f} ms, "
            f"{p.tokens_per_second:.0f} tokens/s, ${p.hourly_usd:.2f}/h, "
            f"${p.per_million_output_tokens_usd:.2f}/1M output tokens ({p.price_source} price)"
        )
    if result.predicted and result.predicted.error_band:
        p = result.predicted
        bands = ", ".join(
            f"{_BAND_NAMES[metric]} x{typical:.2f} typical, x{p90:.2f} at p90"
            for metric, typical, p90 in p.error_band
        )
        lines.append(
            f"ERROR BAND   {bands} (held out, leave-one-publisher-out, "
            f"{engines.LABELS.get(result.engine, result.engine)} on {p.gpu_family} "
            "GPUs; docs/planner-calibration.md)"
        )
    if result.capacity_message:
        lines.append(
            f"SCHEDULABLE  {'yes' if result.schedulable_now else 'no'}: {result.capacity_message}"
        )
    lines.extend(
        textwrap.wrap(
            result.reason, 100, initial_indent="REASON       ", subsequent_indent=" " * 13
        )
    )
    if result.alternatives:
        lines.append("ALTERNATIVES")
        lines.append(
            f"  {'LAYOUT':<13} {'TP':>3} {'PP':>3} {'GPUS':>4}  {'PRODUCT':<26} {'ITL ms':>7} "
            f"{'TTFT ms':>8} {'TOK/S':>7} {'$/H':>7}  REJECTED BECAUSE"
        )
        for alt in result.alternatives:
            figures = alt.predicted
            assert figures is not None  # alternatives are always concrete layouts
            lines.append(
                f"  {alt.layout or '':<13} "
                f"{alt.tensor_parallel:>3} {alt.pipeline_parallel:>3} {alt.gpus_per_replica:>4}  "
                f"{alt.gpu_product or '':<26} {figures.itl_ms:>7.1f} {figures.ttft_ms:>8.0f} "
                f"{figures.tokens_per_second:>7.0f} "
                f"{figures.hourly_usd:>7.2f}  "
                f"{alt.rejected_because}"
            )
    return "\n".join(lines)


def _engines(value: str | None) -> tuple[str, ...]:
    """--engine: () for spec.engine, else the engines named (all: every one)."""
    if not value:
        return ()
    if value.strip() == "all":
        return engines.ALL
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    unknown = [n for n in names if n not in engines.ALL]
    if unknown or not names:
        raise _InputError(f"--engine: must be all or a comma list of {', '.join(engines.ALL)}, "
                          f"got {value!r}")
    return names


def _compare(args: argparse.Namespace, request: Any, inv: Any, asked: Sequence[str],
             prices: dict[str, float] | None, learned: dict[str, plans.Correction]) -> int:
    result = engine_choice.compare(request, inv, asked, prices=prices, learned=learned)
    if args.output == "json":
        print(json.dumps(result.to_dict(), indent=2))
    else:
        lines = [f"  {'ENGINE':<13} {'LAYOUT':<13} {'GPUS':>4} {'ITL ms':>7} {'TTFT ms':>8} "
                 f"{'TOK/S':>7} {'$/1M':>7}  NOTE"]
        for o in result.options:
            p = o.plan
            label = engines.LABELS[o.engine]
            if p is None or p.predicted is None:
                lines.append(f"  {label:<13} not offered: {o.not_offered}")
                continue
            f = p.predicted
            note = "" if o.offered else f"not offered: {o.not_offered}"
            lines.append(
                f"  {label:<13} {p.layout or '':<13} {p.gpus_per_replica:>4} {f.itl_ms:>7.1f} "
                f"{f.ttft_ms:>8.0f} {f.tokens_per_second:>7.0f} "
                f"{f.per_million_output_tokens_usd:>7.2f}  {note}")
        lines.extend(textwrap.wrap(result.reason, 100, initial_indent="BEST         ",
                                   subsequent_indent=" " * 13))
        print("\n".join(lines))
    return EXIT_FEASIBLE if result.best else EXIT_INFEASIBLE


def run(args: argparse.Namespace) -> int:
    """Handle `shardwise plan`; returns the exit status."""
    try:
        spec = _with_workload(_deployment_spec(args.filename), args)
        plan_request.check_strings(spec)  # before any hub lookup of the model's name
        resolved = _resolved_architecture(spec, args.model_config)
        request = planner.request_from_spec(spec, architecture=resolved)
        asked = _engines(args.engine)
        if len(asked) == 1:
            request = dataclasses.replace(request, engine=asked[0])
        nodes, pods = _cluster_objects() if args.cluster else _objects(args.nodes)
        learned = _cluster_corrections(args.operator_namespace) if args.cluster else {}
        if len(asked) > 1:
            return _compare(args, request, planner.inventory_from_nodes(nodes, pods), asked,
                            _prices(args.prices), learned)
        result = planner.plan(
            request,
            planner.inventory_from_nodes(nodes, pods),
            prices=_prices(args.prices),
            learned=learned,
        )
    except (planner.PlanInputError, _InputError) as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.output == "json":
        printed = result.to_dict()
        if resolved is not None:
            printed["architecture"] = hfconfig.describe(request.arch)
        print(json.dumps(printed, indent=2))
    else:
        print(_table(result, request.arch if resolved is not None else None))
    return EXIT_FEASIBLE if result.feasible else EXIT_INFEASIBLE


def main(argv: Sequence[str] | None = None) -> int:
    """Stand-alone entry point: `python -m shardwise.planner.cli plan ...` (tests, debugging)."""
    parser = argparse.ArgumentParser(prog="shardwise")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
