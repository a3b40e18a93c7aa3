"""Fuzz: a resource name the admission rule accepts gives only valid children, and a name that
would give an invalid child is refused (the rule is sound), over names near every boundary."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import fuzz_inputs
from hypothesis import given
from hypothesis import strategies as st
from shardwise.api import names
from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children

_SPEC = InferenceDeploymentSpec.model_validate({"model": {"name": "meta-llama/Llama-3.1-8B-Instruct"}})
# Kubernetes' own rules (apimachinery validation), written out independently of names.py.
_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*")
_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def _label_maps(obj: Any) -> Iterator[dict[str, str]]:
    """Every labels / matchLabels / selector map inside a rendered object."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key in ("labels", "matchLabels") and isinstance(value, dict):
                yield value
            elif key == "selector" and isinstance(value, dict) and all(
                    isinstance(v, str) for v in value.values()):
                yield value
            else:
                yield from _label_maps(value)
    elif isinstance(obj, list):
        for item in obj:
            yield from _label_maps(item)


def child_problems(name: str, plan: dict[str, Any], replicas: int) -> list[str]:
    """What the API server (or a controller under ours) would refuse among `name`'s children."""
    owner = children.Owner(name=name, namespace="ns", uid="uid")
    problems = []
    for obj in children.render(owner, _SPEC, plan, replicas):
        kind, child = obj["kind"], obj["metadata"]["name"]
        if kind == "Service":
            if not (len(child) <= 63 and _DNS1035.fullmatch(child)):
                problems.append(f"Service name {child!r}")
        elif not (len(child) <= 253 and _DNS1123_SUBDOMAIN.fullmatch(child)):
            problems.append(f"{kind} name {child!r}")
        if kind == "LeaderWorkerSet":
            # The LWS controller's worker StatefulSets, and their pods' revision-hash label.
            # The longest is the last group's (spec.replicas may grow to MAX_REPLICAS later).
            statefulset = f"{child}-{names.MAX_REPLICAS - 1}"
            revision = f"{statefulset}-{'9' * 10}"
            if not (len(revision) <= 63 and _LABEL_VALUE.fullmatch(revision)):
                problems.append(f"StatefulSet {statefulset!r} revision label")
            if not (len(child) <= 63 and _DNS1035.fullmatch(child)):
                problems.append(f"LWS headless Service {child!r}")
        for labels in _label_maps(obj):
            for key, value in labels.items():
                if not (len(value) <= 63 and _LABEL_VALUE.fullmatch(value)):
                    problems.append(f"{kind} label {key}={value!r}")
    return problems


@given(name=fuzz_inputs.resource_names, plan=fuzz_inputs.plan_dicts(),
       replicas=st.integers(0, names.MAX_REPLICAS))
def test_accepted_names_give_valid_children(name: str, plan: dict[str, Any], replicas: int) -> None:
    fuzz_inputs.ran("rendering")
    problem = names.name_problem(name)
    if problem is None:
        assert child_problems(name, plan, replicas) == []
        assert names.is_dns1035_label(names.service_name(name))
        assert names.is_label_value(names.longest_derived_label_value(name))
    else:
        assert problem in (names.LENGTH_MESSAGE, names.SHAPE_MESSAGE)


@given(name=fuzz_inputs.resource_names)
def test_the_rule_refuses_every_name_with_an_invalid_child(name: str) -> None:
    fuzz_inputs.ran("name rule")
    multi_node = {"feasible": True, "tensorParallel": 8, "pipelineParallel": 2, "gpusPerReplica": 16,
                  "nodesPerReplica": 2, "gpusPerNode": 8, "gpuProduct": "NVIDIA-H100-80GB-HBM3",
                  "interconnect": "nvswitch", "predicted": {}}
    single = {**multi_node, "pipelineParallel": 1, "gpusPerReplica": 8, "nodesPerReplica": 1}
    if name == "":
        return  # the API server requires a name before any rule
    broken = child_problems(name, multi_node, names.MAX_REPLICAS) + child_problems(name, single, 1)
    if broken:
        assert names.name_problem(name) is not None, broken
