"""spec.disaggregation renders a prefill and a decode Deployment with vLLM's --kv-transfer-config,
and admission (the models; the same rules are CEL in the CRD) refuses what the engine cannot run."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError
from render_builders import OWNER, help_flags, plan, spec

from shardwise.api import v1alpha1
from shardwise.render import children, disaggregation

EXAMPLE = {"mode": "Disaggregated", "connector": "ExampleConnector",
           "sharedStorage": {"claimName": "kv", "path": "/kv"},
           "prefill": {"replicas": 2, "tensor": 4, "slo": {"ttftP95": "2s"}},
           "decode": {"replicas": 3, "slo": {"itlP95": "30ms"}}}


def _flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def _by_kind(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objs}


def test_two_roles_each_with_its_kv_role_replicas_and_layout() -> None:
    objs = _by_kind(children.render(OWNER, spec(disaggregation=EXAMPLE), plan(tp=8), 1))
    prefill = objs[("Deployment", "llama-prefill")]
    decode = objs[("Deployment", "llama-decode")]
    assert ("Deployment", "llama") not in objs  # the aggregated one is not rendered beside them
    assert prefill["spec"]["replicas"] == 2 and decode["spec"]["replicas"] == 3
    p_args = prefill["spec"]["template"]["spec"]["containers"][0]["args"]
    d_args = decode["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _flag(p_args, "--tensor-parallel-size") == "4" and _flag(d_args, "--tensor-parallel-size") == "8"
    gpus = prefill["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"]
    assert gpus == "4"
    assert json.loads(_flag(p_args, "--kv-transfer-config")) == {
        "kv_connector": "ExampleConnector", "kv_role": "kv_producer",
        "kv_connector_extra_config": {"shared_storage_path": "/kv"}}
    assert json.loads(_flag(d_args, "--kv-transfer-config"))["kv_role"] == "kv_consumer"
    for dep in (prefill, decode):
        pod = dep["spec"]["template"]["spec"]
        assert {"name": "kv-transfer", "persistentVolumeClaim": {"claimName": "kv"}} in pod["volumes"]
        assert {"name": "kv-transfer", "mountPath": "/kv"} in pod["containers"][0]["volumeMounts"]
    assert "--kv-transfer-config" in help_flags()


def test_model_service_selects_decode_pods_and_prefill_gets_its_own() -> None:
    objs = _by_kind(children.render(OWNER, spec(disaggregation=EXAMPLE), plan(), 1))
    decode = objs[("Deployment", "llama-decode")]
    service = objs[("Service", "llama")]
    labels = decode["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["selector"][disaggregation.ROLE_LABEL] == "decode"
    assert objs[("Service", "llama-prefill")]["spec"]["selector"][disaggregation.ROLE_LABEL] == "prefill"


def test_auto_connector_is_nixl_with_both_roles_and_the_pod_ip_side_channel() -> None:
    objs = _by_kind(children.render(OWNER, spec(disaggregation={"mode": "Disaggregated"}), plan(), 1))
    for role in ("prefill", "decode"):
        container = objs[("Deployment", f"llama-{role}")]["spec"]["template"]["spec"]["containers"][0]
        assert json.loads(_flag(container["args"], "--kv-transfer-config")) == {
            "kv_connector": "NixlConnector", "kv_role": "kv_both"}
        env = {e["name"]: e for e in container["env"]}
        assert env["VLLM_NIXL_SIDE_CHANNEL_HOST"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"


def test_mode_off_renders_the_aggregated_deployment() -> None:
    objs = _by_kind(children.render(OWNER, spec(disaggregation={"mode": "Aggregated"}), plan(), 2))
    assert objs[("Deployment", "llama")]["spec"]["replicas"] == 2
    assert "--kv-transfer-config" not in objs[("Deployment", "llama")]["spec"]["template"]["spec"]["containers"][0]["args"]


@pytest.mark.parametrize(("overrides", "message"), [
    ({"disaggregation": {"mode": "Disaggregated", "connector": "OffloadingConnector"}},
     v1alpha1.DISAGGREGATION_OFFLOADING_MESSAGE),
    ({"disaggregation": {"mode": "Disaggregated", "connector": "ExampleConnector"}}, v1alpha1.DISAGGREGATION_STORAGE_MESSAGE),
    ({"disaggregation": {"mode": "Disaggregated", "decode": {"replicas": 0}}}, v1alpha1.DISAGGREGATION_DECODE_MESSAGE),
    ({"disaggregation": {"mode": "Disaggregated"}, "autoscaling": {"maxReplicas": 2, "slo": {"itlP95": "50ms"}}},
     v1alpha1.DISAGGREGATION_AUTOSCALING_MESSAGE),
    ({"disaggregation": EXAMPLE, "adapters": [{"name": "a", "source": {"repo": "o/a"}}]},
     v1alpha1.DISAGGREGATION_ADAPTERS_MESSAGE),
    ({"disaggregation": {"mode": "Disaggregated"},
      "serving": {"extraArgs": ["--kv_transfer_config", '{"kv_connector":"NixlConnector"}']}},
     v1alpha1.DISAGGREGATION_EXTRA_ARGS_MESSAGE),
])
def test_admission_refuses_what_the_engine_cannot_run(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError) as error:
        spec(**overrides)
    assert message in str(error.value)
    off = {**overrides, "disaggregation": {**overrides["disaggregation"], "mode": "Aggregated"}}
    spec(**off)  # the same fields are fine while disaggregation is off


def test_cel_rules_carry_the_same_sentences() -> None:
    from shardwise.api import crd
    text = json.dumps(crd.build_crd())
    for message in (v1alpha1.DISAGGREGATION_OFFLOADING_MESSAGE, v1alpha1.DISAGGREGATION_STORAGE_MESSAGE,
                    v1alpha1.DISAGGREGATION_DECODE_MESSAGE, v1alpha1.DISAGGREGATION_AUTOSCALING_MESSAGE,
                    v1alpha1.DISAGGREGATION_ADAPTERS_MESSAGE, v1alpha1.DISAGGREGATION_EXTRA_ARGS_MESSAGE):
        assert json.dumps(message)[1:-1] in text


def test_each_role_prefers_a_node_running_the_other() -> None:
    objs = _by_kind(children.render(OWNER, spec(disaggregation=EXAMPLE), plan(), 1))
    for role, other in (("prefill", "decode"), ("decode", "prefill")):
        pod = objs[("Deployment", f"llama-{role}")]["spec"]["template"]["spec"]
        (term,) = pod["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
        assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
        wanted = term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        other_labels = objs[("Deployment", f"llama-{other}")]["spec"]["template"]["metadata"]["labels"]
        assert wanted.items() <= other_labels.items() and wanted[disaggregation.ROLE_LABEL] == other
