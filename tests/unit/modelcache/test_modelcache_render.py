"""Which cache a spec uses, and the claim, Job and serving pods rendered for it."""

from __future__ import annotations

import pytest

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children, modelcache as mc

PLAN = {"feasible": True, "tensorParallel": 2, "pipelineParallel": 1, "nodesPerReplica": 1, "gpusPerNode": 2,
        "memory": {"weightsGiBPerGPU": 7.0}, "gpuProduct": "NVIDIA-H100-80GB-HBM3", "predicted": {}}


def spec(**model: object) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({"model": {"name": "org/model", **model}})


def test_same_model_and_revision_share_one_cache_and_a_new_revision_gets_another() -> None:
    a = mc.resolve(spec(cache={"mode": "Cluster"}))
    b = mc.resolve(spec(cache={"mode": "Cluster"}, servedName="other"))
    c = mc.resolve(spec(cache={"mode": "Cluster"}, revision="abc123"))
    assert a.claim == b.claim and a.job == b.job and a.claim != c.claim
    assert a.revision == "main" and c.revision == "abc123"


def test_operator_default_mode_applies_when_the_spec_names_none() -> None:
    assert mc.resolve(spec(), default_mode="None").mode == "None"
    assert mc.resolve(spec(), default_mode="Cluster").mode == "Cluster"
    # A path inside the image is never cached.
    local = InferenceDeploymentSpec.model_validate({"model": {"name": "/models/llama"}})
    assert mc.resolve(local, default_mode="Cluster").mode == "None"


def test_claim_is_sized_from_weights_with_margin() -> None:
    weights = mc.weight_bytes(PLAN)
    assert weights == 14 * mc.GIB
    claim = mc.build_claim(mc.resolve(spec(cache={"mode": "Cluster", "storageClassName": "fast"})), "ns", weights)
    # 14 GiB x 1.15 + 1 GiB = 17.1 -> 18 GiB
    assert claim["spec"]["resources"]["requests"]["storage"] == "18Gi"
    assert claim["spec"]["storageClassName"] == "fast" and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert "ownerReferences" not in claim["metadata"]  # shared: collected by the operator


def test_job_has_least_privilege_and_only_it_sees_the_token() -> None:
    ref = mc.resolve(spec(cache={"mode": "Cluster", "hubEndpoint": "http://hub:1"}))
    job = mc.build_job(ref, "ns", "uid-1", image="img", token_secret=("hf", "token"))
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert pod["automountServiceAccountToken"] is False and pod["restartPolicy"] == "Never"
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    env = {e["name"]: e for e in container["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}
    assert env["HF_ENDPOINT"]["value"] == "http://hub:1"
    assert job["metadata"]["ownerReferences"][0]["kind"] == "PersistentVolumeClaim"
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onExitCodes"]["values"] == [2]
    assert job["spec"]["template"]["metadata"]["labels"][mc.CACHE_LABEL] == ref.key


def test_serving_pods_mount_the_cache_read_only_load_from_the_path_and_never_see_the_token() -> None:
    s = spec(cache={"mode": "Cluster"}, hfTokenSecretRef={"name": "hf"})
    ref = mc.resolve(s)
    owner = children.Owner("m", "ns", "uid")
    objs = children.render(owner, s, PLAN, 1, cache=ref,
                           expected_start_s=mc.expected_start_seconds(mc.weight_bytes(PLAN), cached=True))
    pod = objs[0]["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": ref.claim, "readOnly": True}} in pod["volumes"]
    assert {"name": "model-cache", "mountPath": "/model-cache", "readOnly": True} in container["volumeMounts"]
    assert container["args"][0] == "/model-cache/model" and "org/model" not in container["args"]
    names = {e["name"] for e in container["env"]}
    assert "HF_TOKEN" not in names and "HF_HUB_OFFLINE" in names


def test_startup_probe_follows_the_expected_load_time() -> None:
    weights = 140 * 10**9  # a 70B model in bf16
    warm = mc.expected_start_seconds(weights, cached=True)
    cold = mc.expected_start_seconds(weights, cached=False)
    assert warm < cold / 3
    s = spec(cache={"mode": "Cluster"})
    cached = children.render(children.Owner("m", "ns", "u"), s, PLAN, 1, cache=mc.resolve(s), expected_start_s=warm)
    probe = cached[0]["spec"]["template"]["spec"]["containers"][0]["startupProbe"]
    assert probe["failureThreshold"] * probe["periodSeconds"] >= 2 * warm
    uncached = children.render(children.Owner("m", "ns", "u"), s, PLAN, 1, cache=mc.resolve(spec(cache={"mode": "None"})),
                               expected_start_s=cold)
    assert uncached[0]["spec"]["template"]["spec"]["containers"][0]["startupProbe"]["failureThreshold"] >= 180


@pytest.mark.parametrize("size", ["10Gi", "1Ti"])
def test_size_override(size: str) -> None:
    claim = mc.build_claim(mc.resolve(spec(cache={"mode": "Cluster", "size": size})), "ns", 10)
    assert claim["spec"]["resources"]["requests"]["storage"] == size


def test_claim_is_sized_from_a_real_plan() -> None:
    """The plan the planner writes (weights under `memory`), not a hand-made one: a 70B model in
    bf16 on H100s must get a claim for its ~131 GiB of weights, not the 1 GiB floor."""
    from shardwise import planner

    h100 = {"kind": "Node", "metadata": {"name": "h100", "labels": {
        "kubernetes.io/hostname": "h100", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.count": "8", "shardwise.io/gpu-interconnect": "nvswitch",
        "shardwise.io/nvlink-domain-size": "8"}},
        "spec": {}, "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"},
                               "conditions": [{"type": "Ready", "status": "True"}]}}
    request = planner.request_from_spec(
        spec(name="meta-llama/Llama-3.1-70B-Instruct", dtype="bfloat16").model_dump(mode="json", by_alias=True, exclude_none=True))
    plan = planner.plan(request, planner.inventory_from_nodes([h100])).to_dict()
    assert plan["feasible"], plan["reason"]
    weights_gib = mc.weight_bytes(plan) / mc.GIB
    assert 125 < weights_gib < 140, weights_gib
