"""Revision and decision on the workload: a rollout starts only when the pods change, and keeps
its strategy until the next one."""

from __future__ import annotations

import copy
from typing import Any

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children
from shardwise.rollout import strategy, workload

OWNER = children.Owner(name="m", namespace="ns", uid="u")
PLAN = {"feasible": True, "gpusPerNode": 1, "nodesPerReplica": 1, "gpuProduct": "NVIDIA-L4", "tensorParallel": 1,
        "pipelineParallel": 1, "interconnect": "pcie"}
REPLACE = strategy.Decision(strategy.REPLACE_IN_PLACE, "no room", free_gpus=0, needed_gpus=1)


def rendered(image: str = "vllm/vllm-openai:v0.32.0", kind_plan: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = InferenceDeploymentSpec.model_validate({"model": {"name": "m"}, "serving": {"image": image}})
    return children.render(OWNER, spec, kind_plan or PLAN, 3)[0]


def test_revision_follows_the_pod_template_only() -> None:
    base = rendered()
    scaled = copy.deepcopy(base)
    scaled["spec"]["replicas"] = 7
    assert workload.revision(base) == workload.revision(scaled)
    assert workload.revision(base) != workload.revision(rendered(image="vllm/vllm-openai:v0.33.0"))
    assert len(workload.revision(base)) == 12


def test_stamp_sets_the_knobs_and_annotations_of_a_deployment() -> None:
    out = workload.stamp(rendered(), "r1", REPLACE, "r0")
    assert out["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}
    assert workload.live_revision(out) == "r1" and workload.previous_revision(out) == "r0"
    assert workload.decision(out) == REPLACE


def test_stamp_sets_group_knobs_on_a_leaderworkerset() -> None:
    lws = rendered(kind_plan={**PLAN, "gpusPerNode": 8, "nodesPerReplica": 2, "tensorParallel": 8,
                              "pipelineParallel": 2, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "interconnect": "nvswitch"})
    assert lws["kind"] == "LeaderWorkerSet"
    out = workload.stamp(lws, workload.revision(lws), REPLACE, None)
    assert out["spec"]["rolloutStrategy"] == {"type": "RollingUpdate",
                                              "rollingUpdateConfiguration": {"maxSurge": 0, "maxUnavailable": 1}}
    assert workload.PREVIOUS_ANNOTATION not in out["metadata"]["annotations"]


def test_without_a_decision_the_rendered_surge_knobs_stay() -> None:
    base = rendered()
    out = workload.stamp(base, "r1", None, None)
    assert out["spec"]["strategy"] == base["spec"]["strategy"]
    assert workload.decision(out) is None


def test_carry_starts_a_rollout_only_when_the_pods_change() -> None:
    live = workload.stamp(rendered(), "r1", REPLACE, "r0")
    # New workload: created, not rolled.
    assert workload.carry("r1", None, pods_unchanged=False) == workload.Carry(False, None, None)
    # Same revision (scaling, a status change): the decision is kept, never re-chosen.
    assert workload.carry("r1", live, pods_unchanged=True) == workload.Carry(False, REPLACE, "r0")
    # A new revision starts one, replacing r1.
    assert workload.carry("r2", live, pods_unchanged=False) == workload.Carry(True, None, "r1")
    # Back to r0, the version r1 replaced: a rollback.
    assert workload.carry("r0", live, pods_unchanged=False) == workload.Carry(True, None, "r1", rollback=True)


def test_a_workload_from_before_revisions_is_adopted_without_a_rollout() -> None:
    old = rendered()
    assert workload.carry("r1", old, pods_unchanged=True) == workload.Carry(False, None, None)
    assert workload.carry("r1", old, pods_unchanged=False).starts


def test_an_unreadable_decision_annotation_reads_as_none() -> None:
    live = workload.stamp(rendered(), "r1", REPLACE, None)
    live["metadata"]["annotations"][workload.DECISION_ANNOTATION] = "{not json"
    assert workload.decision(live) is None
