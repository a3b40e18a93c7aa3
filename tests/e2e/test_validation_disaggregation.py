"""spec.disaggregation at the real API server: what vLLM 0.32 cannot run is refused with the
same sentence the pydantic models give offline (api/v1alpha1.py), and a runnable pair is accepted.
The CEL rules' cost must also fit the API server's budget, which only a real server checks."""

from __future__ import annotations

import json

import pytest
import yaml

from shardwise.api import v1alpha1
from tests.e2e.support import Kubectl
from tests.e2e.test_validation import with_spec

pytestmark = pytest.mark.e2e

ON = {"mode": "Disaggregated"}
EXAMPLE = {"mode": "Disaggregated", "connector": "ExampleConnector", "sharedStorage": {"claimName": "kv"}}
REFUSED = [
    ("offloading", with_spec(disaggregation={"mode": "Disaggregated", "connector": "OffloadingConnector"}),
     v1alpha1.DISAGGREGATION_OFFLOADING_MESSAGE),
    ("example without a claim", with_spec(disaggregation={"mode": "Disaggregated", "connector": "ExampleConnector"}),
     v1alpha1.DISAGGREGATION_STORAGE_MESSAGE),
    ("decode zero", with_spec(disaggregation={"mode": "Disaggregated", "decode": {"replicas": 0}}),
     v1alpha1.DISAGGREGATION_DECODE_MESSAGE),
    ("autoscaling", with_spec(disaggregation=ON, autoscaling={"maxReplicas": 2, "slo": {"itlP95": "50ms"}}),
     v1alpha1.DISAGGREGATION_AUTOSCALING_MESSAGE),
    ("example with adapters", with_spec(disaggregation=EXAMPLE, adapters=[{"name": "a", "source": {"repo": "o/a"}}],
                                        lora={}), v1alpha1.DISAGGREGATION_ADAPTERS_MESSAGE),
    ("kv flag in extraArgs", with_spec(disaggregation=ON, serving__extraArgs=["--kv-transfer-config={}"]),
     v1alpha1.DISAGGREGATION_EXTRA_ARGS_MESSAGE),
    ("prefill autoscaling without its TTFT", with_spec(disaggregation={**ON, "prefill": {
        "autoscaling": {"maxReplicas": 2}}}), v1alpha1.DISAGGREGATION_PREFILL_SLO_MESSAGE),
    ("decode autoscaling without its ITL", with_spec(disaggregation={**ON, "decode": {
        "slo": {}, "autoscaling": {"maxReplicas": 2}}}), v1alpha1.DISAGGREGATION_DECODE_SLO_MESSAGE),
    ("zero for one role only", with_spec(disaggregation={**ON, "prefill": {"slo": {"ttftP95": "2s"}, "autoscaling": {
        "minReplicas": 1, "maxReplicas": 2}}, "decode": {"slo": {"itlP95": "30ms"}, "autoscaling": {
            "minReplicas": 0, "allowScaleToZero": True, "maxReplicas": 2}}}), v1alpha1.DISAGGREGATION_PAIR_ZERO_MESSAGE),
]


@pytest.mark.parametrize("case,doc,message", REFUSED, ids=[c[0] for c in REFUSED])
def test_what_the_engine_cannot_run_is_refused(kubectl: Kubectl, case: str, doc: dict, message: str) -> None:
    result = kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc), check=False)
    assert result.returncode != 0, f"{case}: the API server accepted it"
    assert message in result.stderr, f"{case}: {result.stderr.strip()}"


def test_a_runnable_pair_is_accepted_with_its_defaults(kubectl: Kubectl) -> None:
    doc = with_spec(disaggregation={**EXAMPLE, "prefill": {"replicas": 2, "slo": {"ttftP95": "2s"}}})
    kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc))
    got = kubectl.run("get", "infd", doc["metadata"]["name"], "-o", "json")
    stored = json.loads(got.stdout)["spec"]["disaggregation"]
    assert stored["decode"]["replicas"] == 1 and stored["prefill"]["replicas"] == 2
    assert stored["sharedStorage"]["path"] == "/var/run/shardwise/kv"


def test_a_pair_scaled_per_role_to_zero_is_accepted(kubectl: Kubectl) -> None:
    zero = {"minReplicas": 0, "allowScaleToZero": True, "maxReplicas": 3}
    doc = with_spec(disaggregation={**ON, "prefill": {"slo": {"ttftP95": "2s"}, "autoscaling": zero},
                                    "decode": {"slo": {"itlP95": "30ms"}, "autoscaling": zero}})
    kubectl.run("create", "-f", "-", input=yaml.safe_dump(doc))
    got = json.loads(kubectl.run("get", "infd", doc["metadata"]["name"], "-o", "json").stdout)
    decode = got["spec"]["disaggregation"]["decode"]["autoscaling"]
    assert decode["minReplicas"] == 0 and decode["scaleDownStabilizationSeconds"] == 300  # the shared defaults
