"""Which pods get the real vLLM engine, and how the rendered container becomes a local process."""

from __future__ import annotations

import pathlib
from typing import Any

from shardwise.api.v1alpha1 import InferenceDeploymentSpec
from shardwise.render import children, leaderworkerset
from shardwise_runtime.sim import fleet, real

INSTALL = real.Install(home=pathlib.Path("/cache/vllm"), launcher="/repo/.venv/bin/shardwise-launch")
OWNER = children.Owner(name="tiny", namespace="ns", uid="u-1")
BASE_ENV = {"PATH": "/usr/bin", "HOME": "/root"}


def _spec(**serving: Any) -> InferenceDeploymentSpec:
    return InferenceDeploymentSpec.model_validate({
        "model": {"name": "meta-llama/Llama-3.1-8B-Instruct", "servedName": "tiny"},
        "serving": {"maxModelLen": 2048, "maxConcurrency": 4, "image": real.LOCAL_VLLM_CPU_IMAGE, **serving}})


def _plan(tp: int = 1, pp: int = 1, nodes: int = 1) -> dict[str, Any]:
    return {"feasible": True, "tensorParallel": tp, "pipelineParallel": pp, "gpusPerReplica": tp * pp,
            "nodesPerReplica": nodes, "gpusPerNode": tp * pp // nodes, "gpuProduct": "NVIDIA-L40S",
            "interconnect": "pcie", "memory": {"weightsGiBPerGPU": 15.0}}


def _pod(template: dict[str, Any], name: str, ip: str | None, labels: dict[str, str] | None = None,
         env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    spec = {**template["spec"]}
    if env:
        spec["containers"] = [{**spec["containers"][0], "env": [*spec["containers"][0]["env"], *env]}]
    return {"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                         "labels": {**template["metadata"]["labels"], **(labels or {})}},
            "spec": spec, "status": {"phase": "Running", **({"podIP": ip} if ip else {})}}


def _deployment_pod(spec: InferenceDeploymentSpec, plan: dict[str, Any], ip: str | None = "127.9.0.4") -> dict[str, Any]:
    deployment = children.render(OWNER, spec, plan, 1)[0]
    return _pod(deployment["spec"]["template"], "tiny-abc", ip)


def test_only_pods_with_the_local_cpu_image_ask_for_the_real_engine() -> None:
    pod = _deployment_pod(_spec(), _plan())
    assert real.wants_real_engine(pod)
    other = _deployment_pod(_spec(image="vllm/vllm-openai:v0.32.0"), _plan())
    assert not real.wants_real_engine(other)
    # ...and such pods never get a simulated engine on their IP.
    assert fleet.desired_engines({"ns/tiny-abc": pod}) == {}
    assert list(fleet.desired_engines({"ns/tiny-abc": other})) == ["ns/tiny-abc"]


def test_rendered_argv_runs_as_is_except_executable_model_and_bind_address() -> None:
    spec, plan = _spec(), _plan()
    pod = _deployment_pod(spec, plan)
    launch = real.real_launch(pod, INSTALL, base_env=BASE_ENV, cpus=2)
    assert launch is not None
    rendered = pod["spec"]["containers"][0]
    expected = [INSTALL.vllm, "serve", INSTALL.model, *rendered["args"][1:], "--host", "127.9.0.4"]
    assert list(launch.argv) == expected
    env = dict(launch.env)
    assert env["POD_IP"] == "127.9.0.4"  # the downward API, resolved
    assert env["PATH"].startswith(str(INSTALL.bin_dir))
    assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0" and env["HF_HUB_OFFLINE"] == "1"
    said = "\n".join(launch.changes)
    assert "meta-llama/Llama-3.1-8B-Instruct" in said and "--host 127.9.0.4" in said
    # The probes are the rendered ones, port name resolved.
    assert launch.readiness is not None and launch.readiness.port == 8000
    assert launch.startup is not None and launch.startup.failure_threshold == rendered["startupProbe"]["failureThreshold"]


def test_quantization_is_dropped_and_said_so() -> None:
    launch = real.real_launch(_deployment_pod(_spec(), _plan()) | {}, INSTALL, base_env=BASE_ENV, cpus=2)
    assert launch is not None and "--quantization" not in launch.argv
    fp8 = InferenceDeploymentSpec.model_validate({**_spec().model_dump(exclude_none=True),
                                                  "model": {"name": "m/m", "dtype": "fp8"}})
    launch = real.real_launch(_deployment_pod(fp8, _plan()), INSTALL, base_env=BASE_ENV, cpus=2)
    assert launch is not None and "--quantization" not in launch.argv and "fp8" not in launch.argv
    assert any("dropped --quantization fp8" in change for change in launch.changes)


def test_tp2_binds_one_core_per_rank() -> None:
    launch = real.real_launch(_deployment_pod(_spec(), _plan(tp=2)), INSTALL, base_env=BASE_ENV, cpus=2)
    assert launch is not None and dict(launch.env)["VLLM_CPU_OMP_THREADS_BIND"] == "0|1"


def test_secrets_are_left_out_and_a_pod_without_ip_waits() -> None:
    pod = _deployment_pod(_spec(), _plan(), ip=None)
    assert real.real_launch(pod, INSTALL, base_env=BASE_ENV, cpus=2) is None
    pod = _deployment_pod(_spec(), _plan())
    pod["spec"]["containers"][0]["env"].append(
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}})
    launch = real.real_launch(pod, INSTALL, base_env=BASE_ENV, cpus=2)
    assert launch is not None and "HF_TOKEN" not in dict(launch.env)
    assert any("HF_TOKEN left out" in c for c in launch.changes)


def test_multi_node_group_runs_the_launcher_with_the_leaders_ip_and_one_master_port() -> None:
    spec, plan = _spec(), _plan(tp=1, pp=2, nodes=2)
    lws = leaderworkerset.build_leaderworkerset(OWNER, spec, plan, 1)
    template = lws["spec"]["leaderWorkerTemplate"]
    group = {"leaderworkerset.sigs.k8s.io/group-key": "g1"}
    lws_env = [{"name": "LWS_LEADER_ADDRESS", "value": "tiny-lws-0.tiny-lws.ns"},
               {"name": "LWS_GROUP_SIZE", "value": "2"}]
    leader = _pod(template["leaderTemplate"], "tiny-lws-0", "127.9.0.10",
                  {**group, "leaderworkerset.sigs.k8s.io/worker-index": "0"},
                  [*lws_env, {"name": "LWS_WORKER_INDEX", "value": "0"}])
    worker = _pod(template["workerTemplate"], "tiny-lws-0-1", "127.9.0.11",
                  {**group, "leaderworkerset.sigs.k8s.io/worker-index": "1"},
                  [*lws_env, {"name": "LWS_WORKER_INDEX", "value": "1"}])
    ports: list[str] = []
    launches = fleet.desired_real_engines(
        {"ns/tiny-lws-0": leader, "ns/tiny-lws-0-1": worker}, INSTALL, base_env=BASE_ENV, cpus=2,
        master_port=lambda g: ports.append(g) or 29777)
    assert set(launches) == {"ns/tiny-lws-0", "ns/tiny-lws-0-1"}
    assert ports == ["ns/g1", "ns/g1"]
    for key, launch in launches.items():
        argv = list(launch.argv)
        assert argv[0] == INSTALL.launcher
        split = argv.index("--")
        rendered_launch_flags = (template["leaderTemplate"] if key.endswith("-0") else
                                 template["workerTemplate"])["spec"]["containers"][0]["args"]
        assert argv[1:split] == rendered_launch_flags[:rendered_launch_flags.index("--")]
        assert argv[split + 1] == INSTALL.model
        assert argv[-2:] == ["--master-port", "29777"]
        env = dict(launch.env)
        assert env["LWS_LEADER_ADDRESS"] == "127.9.0.10"
        assert env["VLLM_CPU_OMP_THREADS_BIND"] == "0"  # PP2 over 2 pods: one rank each
    assert launches["ns/tiny-lws-0"].readiness is not None
    assert launches["ns/tiny-lws-0-1"].readiness is None  # workers have no probes


def test_deleting_pod_gets_no_process() -> None:
    pod = _deployment_pod(_spec(), _plan())
    pod["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert fleet.desired_real_engines({"ns/x": pod}, INSTALL, base_env=BASE_ENV, cpus=2,
                                      master_port=lambda g: 1) == {}
