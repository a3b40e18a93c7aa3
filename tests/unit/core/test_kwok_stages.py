"""kwok's pod stages for the local cluster: real-engine pods start Running but NotReady."""

from __future__ import annotations

import yaml

from shardwise.devcluster.cluster import KWOK_POD_STAGES
from shardwise_runtime.sim.real import LOCAL_VLLM_CPU_IMAGE


def _stages() -> dict[str, dict]:
    return {doc["metadata"]["name"]: doc for doc in yaml.safe_load_all(KWOK_POD_STAGES.read_text())}


def test_real_engine_pods_start_running_but_not_ready_and_others_as_before() -> None:
    stages = _stages()
    ready, real = stages["pod-ready"], stages["pod-running-real-engine"]
    image = {"key": ".spec.containers.[].image", "values": [LOCAL_VLLM_CPU_IMAGE]}
    assert {**image, "operator": "NotIn"} in ready["spec"]["selector"]["matchExpressions"]
    assert {**image, "operator": "In"} in real["spec"]["selector"]["matchExpressions"]
    # Apart from the image expression and readiness, the two stages are the same (kwok's own).
    ours = yaml.safe_load(yaml.safe_dump(real))
    ours["metadata"]["name"] = "pod-ready"
    ours["spec"]["selector"] = ready["spec"]["selector"]
    template = ours["spec"]["next"]["statusTemplate"]
    assert template.count('status: "False"') == 2 and "ready: false" in template
    ours["spec"]["next"]["statusTemplate"] = (template.replace('status: "False"', 'status: "True"')
                                              .replace("ready: false", "ready: true", 1))
    assert ours == ready
