"""The autoscaler shell's pure pieces: GPU capacity in replicas, HPA conflicts, the recorded decision."""

from __future__ import annotations

from typing import Any

import pytest
from shardwise import autoscale, planner
from shardwise.autoscale import Decision, History
from shardwise.decide import scaling_status

STAMP = "2026-01-01T00:00:00Z"


def node(name: str, product: str, gpus: int, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product,
                                                  "nvidia.com/gpu.count": str(gpus), **labels}},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus)},
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def pod_on(node_name: str, gpus: int) -> dict[str, Any]:
    return {"metadata": {"name": f"p-{node_name}-{gpus}", "namespace": "other"},
            "spec": {"nodeName": node_name,
                     "containers": [{"resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


NODES = [node("a1", "NVIDIA-A100-80GB-PCIe", 4, zone="x"), node("a2", "NVIDIA-A100-80GB-PCIe", 4, zone="y"),
         node("l1", "NVIDIA-L40S", 4)]


@pytest.mark.parametrize(("plan", "others", "selector", "expected"), [
    ({"gpuProduct": "NVIDIA-A100-80GB-PCIe", "gpusPerNode": 1}, [], {}, 8),
    ({"gpuProduct": "NVIDIA-A100-80GB-PCIe", "gpusPerNode": 2}, [pod_on("a1", 3)], {}, 2),  # 1 free on a1: none
    ({"gpuProduct": "NVIDIA-A100-80GB-PCIe", "gpusPerNode": 1}, [], {"zone": "y"}, 4),
    ({"gpuProduct": "NVIDIA-A100-80GB-PCIe", "gpusPerNode": 4, "nodesPerReplica": 2}, [], {}, 1),
    ({"gpuProduct": "NVIDIA-H200", "gpusPerNode": 1}, [], {}, 0),
    ({"gpuProduct": None, "gpusPerNode": 0}, [], {}, None),
])
def test_capacity_counts_whole_replicas_on_free_gpus_of_the_planned_product(
        plan: dict[str, Any], others: list[dict[str, Any]], selector: dict[str, str], expected: int | None) -> None:
    inv = planner.inventory_from_nodes(NODES, others)
    assert scaling_status.capacity_replicas(plan, inv, selector) == expected


def test_hpa_conflicts_only_for_hpas_aimed_at_this_inference_deployment() -> None:
    def hpa(name: str, kind: str, target: str, api_version: str = "shardwise.io/v1alpha1") -> dict[str, Any]:
        return {"metadata": {"name": name},
                "spec": {"scaleTargetRef": {"kind": kind, "name": target, "apiVersion": api_version}}}

    hpas = [hpa("z", "InferenceDeployment", "m"), hpa("d", "Deployment", "m", "apps/v1"),
            hpa("o", "InferenceDeployment", "other"), hpa("a", "InferenceDeployment", "m")]
    assert scaling_status.hpa_conflicts(hpas, "m") == ["a", "z"]
    assert scaling_status.conflict_condition(["a"]).status is True
    assert scaling_status.conflict_condition([]).status is False


def test_observation_counts_starting_replicas_and_tolerates_no_summary() -> None:
    obs = scaling_status.observation(None, current=3, ready=1, capacity=4)
    assert (obs.replicas_ready, obs.replicas_starting, obs.ttft_p95_ms, obs.has_traffic) == (1, 2, None, False)
    # Replicas being removed are not "starting": ready above current is capped, not negative.
    down = scaling_status.observation(None, current=1, ready=2, capacity=None)
    assert (down.replicas_ready, down.replicas_starting) == (1, 0)


def decision(desired: int, current: int, *, capacity_limited: bool = False) -> Decision:
    return Decision(desired_replicas=desired, current_replicas=current, recommendation=desired,
                    cause="TTFT p95 812 ms > SLO 500 ms for 1 period", capacity_limited=capacity_limited,
                    history_window_s=60.0)


def test_a_scale_up_is_recorded_announced_and_stamped() -> None:
    out = scaling_status.apply_decision({}, decision(3, 2), capacity=None, stamp=STAMP)
    assert out.changed
    assert out.update["desiredReplicas"] == 3
    status = out.update["autoscaling"]
    assert (status["lastScaleTime"], status["capacityLimited"]) == (STAMP, False)
    assert "812 ms" in status["reason"]
    assert out.events == (("Normal", "ScaledUp", "TTFT p95 812 ms > SLO 500 ms for 1 period: replicas 2 -> 3"),)


def test_a_hold_that_changes_nothing_writes_nothing_and_posts_nothing() -> None:
    first = scaling_status.apply_decision({}, decision(2, 2), capacity=None, stamp=STAMP)
    assert first.update["autoscaling"].get("lastScaleTime") is None
    status = {"desiredReplicas": 2, "autoscaling": {**first.update["autoscaling"], "lastScaleTime": "earlier"}}
    again = scaling_status.apply_decision(status, decision(2, 2), capacity=None, stamp="later")
    assert not again.changed and again.events == () and again.update == {}


def test_capacity_warning_only_on_the_transition() -> None:
    limited = decision(4, 4, capacity_limited=True)
    first = scaling_status.apply_decision({}, limited, capacity=4, stamp=STAMP)
    assert [e[1] for e in first.events] == ["InsufficientGPUCapacity"]
    assert "only 4 replicas fit" in first.events[0][2]
    again = scaling_status.apply_decision({"desiredReplicas": 4, "autoscaling": first.update["autoscaling"]}, limited,
                                       capacity=4, stamp=STAMP)
    assert again.events == () and again.update == {}


def test_decision_through_the_real_policy_lands_on_the_status() -> None:
    policy = autoscale.policy_from_spec({"maxReplicas": 4, "slo": {"ttftP95": "500ms"}})
    obs = scaling_status.observation(None, current=1, ready=1, capacity=2)
    made = autoscale.decide(policy, obs, History(), 10.0)
    out = scaling_status.apply_decision({}, made, capacity=2, stamp=STAMP)
    assert out.update["desiredReplicas"] == 1 and not out.changed


def test_itl_floor_uses_observed_ratio_over_the_prediction() -> None:
    predicted = {"itlMs": 20.0, "idleItlMs": 10.0}
    assert scaling_status.itl_floor_ms(predicted, None) == 10.0
    observed = {"itlMs": {"predicted": 12.0, "observed": 18.0, "ratio": 1.5}}
    assert scaling_status.itl_floor_ms(predicted, observed) == 15.0
    # A plan made with a learned correction: the observed ratio replaces it, not multiplies it.
    corrected = {"idleItlMs": 12.0, "correction": {"itlFactor": 1.2}}
    assert scaling_status.itl_floor_ms(corrected, observed) == pytest.approx(15.0)
    assert scaling_status.itl_floor_ms({"itlMs": 20.0}, None) == 20.0
    assert scaling_status.itl_floor_ms(None, observed) is None


def test_observation_marks_an_unfinished_rollout() -> None:
    def seen(rollout: dict[str, Any] | None) -> bool:
        return scaling_status.observation(None, current=3, ready=3, capacity=4, rollout=rollout).rollout_in_progress

    assert seen({"state": "InProgress"}) and seen({"state": "Blocked"}) and seen({"state": "Failed"})
    assert not seen({"state": "Complete"}) and not seen(None)


def test_capacity_leaves_out_nodes_whose_taints_the_pods_do_not_tolerate() -> None:
    tainted = node("t1", "NVIDIA-L40S", 4)
    tainted["spec"] = {"taints": [{"key": "team", "value": "a", "effect": "NoSchedule"}]}
    inv = planner.inventory_from_nodes([tainted, node("l2", "NVIDIA-L40S", 4)])
    plan = {"gpuProduct": "NVIDIA-L40S", "gpusPerNode": 4}
    assert scaling_status.capacity_replicas(plan, inv, {}) == 1
    tolerate = planner.placement.Toleration(key="team", operator="Equal", value="a", effect="NoSchedule")
    assert scaling_status.capacity_replicas(plan, inv, {}, (tolerate,)) == 2


@pytest.mark.parametrize("wake,last,held", [
    (None, None, 0.0),  # the gateway never asked
    ("2026-01-01T00:00:05Z", None, 1.0),  # asked, never scaled
    ("2026-01-01T00:00:05Z", "2026-01-01T00:00:01Z", 1.0),  # asked after the last scaling decision
    ("2026-01-01T00:00:05Z", "2026-01-01T00:00:06Z", 0.0),  # the wake-up was decided since
])
def test_a_wake_request_is_demand_until_a_scaling_decision_answers_it(wake, last, held) -> None:
    annotations = {"shardwise.io/wake-requested": wake} if wake else {}
    status = {"autoscaling": {"lastScaleTime": last}} if last else {}
    assert scaling_status.held_at_gateway(annotations, status) == held
