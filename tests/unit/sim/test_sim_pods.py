"""Pod -> engine mapping and the fleet's change plan: pure, table-driven, no cluster."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from shardwise_runtime.sim import fleet, measured, pods, targets
from shardwise_runtime.sim.config import EngineConfig


class PodBuilder:
    """A serving pod as the API server returns it (camelCase dict), edited fluently."""

    def __init__(self, name: str = "llama-0", ip: str = "127.1.0.7") -> None:
        self.pod: dict[str, Any] = {
            "metadata": {
                "name": name,
                "namespace": "ml",
                "uid": f"uid-{name}",
                "labels": {pods.INFERENCE_LABEL: "llama"},
                "annotations": {
                    pods.PARAMETERS_ANNOTATION: "8030000000",
                    pods.MAX_CONCURRENCY_ANNOTATION: "16",
                },
            },
            "spec": {
                "containers": [
                    {
                        "name": "vllm",
                        "command": ["vllm"],
                        "args": [
                            "serve",
                            "meta-llama/Llama-3.1-8B-Instruct",
                            "--served-model-name",
                            "llama",
                            "--max-model-len",
                            "8192",
                            "--tensor-parallel-size",
                            "2",
                        ],
                    }
                ]
            },
            "status": {"phase": "Running", "podIP": ip},
        }
        self.pod["spec"]["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": pods.GPU_PRODUCT_LABEL, "operator": "In", "values": ["NVIDIA-H100-80GB-HBM3"]}]}]}}}

    def label(self, key: str, value: str | None) -> PodBuilder:
        labels = self.pod["metadata"]["labels"]
        labels.pop(key, None) if value is None else labels.__setitem__(key, value)
        return self

    def annotation(self, key: str, value: str | None) -> PodBuilder:
        notes = self.pod["metadata"]["annotations"]
        notes.pop(key, None) if value is None else notes.__setitem__(key, value)
        return self

    def args(self, *args: str, command: list[str] | None = None) -> PodBuilder:
        self.pod["spec"]["containers"][0].update(args=list(args), command=command or [])
        return self

    def status(self, **fields: Any) -> PodBuilder:
        self.pod["status"].update(fields)
        return self

    def build(self) -> dict[str, Any]:
        return copy.deepcopy(self.pod)


def test_a_running_leader_gets_an_engine_with_measured_base_latencies() -> None:
    config = pods.engine_config_from_pod(PodBuilder().build())
    assert config is not None
    assert (config.host, config.port) == ("127.1.0.7", 8000)
    assert config.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert config.served_model_names == ("llama",)
    expected = measured.base_latencies("NVIDIA-H100-80GB-HBM3", 8.03e9, 2.0, 2)
    assert expected is not None
    assert (config.ttft_ms, config.itl_ms, config.max_concurrency) == (*expected, 16)
    assert (config.max_model_len, config.tensor_parallel_size) == (8192, 2)


@pytest.mark.parametrize(
    "builder",
    [
        PodBuilder().label(pods.INFERENCE_LABEL, None),
        PodBuilder().label(pods.WORKER_INDEX_LABEL, "1"),
        PodBuilder().status(phase="Pending"),
        PodBuilder().status(podIP=None),
        PodBuilder().status(podIP="10.0.0.7"),
        PodBuilder().status(podIP="::1"),
        PodBuilder().status(podIP="not-an-ip"),
        PodBuilder().args("--port", "8000", command=["python"]),
    ],
    ids=["unlabelled", "worker", "pending", "no-ip", "routable-ip", "ipv6", "bad-ip", "no-model"],
)
def test_pods_that_must_not_get_an_engine(builder: PodBuilder) -> None:
    assert pods.engine_config_from_pod(builder.build()) is None


def test_terminating_pods_lose_their_engine() -> None:
    pod = PodBuilder().build()
    pod["metadata"]["deletionTimestamp"] = "2026-11-30T13:00:00Z"
    assert pods.engine_config_from_pod(pod) is None


def test_group_leader_serves() -> None:
    pod = PodBuilder().label(pods.WORKER_INDEX_LABEL, "0").build()
    assert pods.engine_config_from_pod(pod) is not None


@pytest.mark.parametrize(
    "args, command, model, served",
    [
        (["serve", "org/m"], ["vllm"], "org/m", ("org/m",)),
        (
            ["--model", "org/m", "--served-model-name", "a", "b"],
            ["python", "-m", "vllm.entrypoints.openai.api_server"],
            "org/m",
            ("a", "b"),
        ),
        (
            ["-c", "vllm serve org/m --served-model-name=x --max-model-len 4k"],
            ["/bin/sh"],
            "org/m",
            ("x",),
        ),
        (["--served-model-name", "only"], ["vllm", "serve"], "only", ("only",)),
    ],
    ids=["positional", "flags", "shell", "name-only"],
)
def test_model_and_served_names_from_the_arguments(
    args: list[str], command: list[str], model: str, served: tuple[str, ...]
) -> None:
    config = pods.engine_config_from_pod(PodBuilder().args(*args, command=command).build())
    assert config is not None and (config.model, config.served_model_names) == (model, served)


def test_vllm_number_forms() -> None:
    parsed = pods.parse_vllm_args(["serve", "m", "--max-model-len", "8K", "--max-num-seqs=64"])
    assert (parsed.max_model_len, parsed.max_num_seqs) == (8192, 64)
    assert pods.parse_vllm_args(["serve", "m", "--max-model-len", "lots"]).max_model_len is None


def test_missing_or_bad_annotations_fall_back() -> None:
    defaults = EngineConfig(host="127.0.0.1", model="m", served_model_names=("m",))
    pod = (
        PodBuilder()
        .annotation(pods.PARAMETERS_ANNOTATION, "lots")
        .annotation(pods.SLOWDOWN_ANNOTATION, "-3")
        .annotation(pods.MAX_CONCURRENCY_ANNOTATION, None)
        .args("serve", "m", "--max-num-seqs", "48", command=["vllm"])
        .build()
    )
    config = pods.engine_config_from_pod(pod)
    assert config is not None
    assert (config.ttft_ms, config.itl_ms) == (defaults.ttft_ms, defaults.itl_ms)
    assert config.max_concurrency == 48
    bare = pods.engine_config_from_pod(
        PodBuilder().annotation(pods.MAX_CONCURRENCY_ANNOTATION, None).build()
    )
    assert bare is not None and bare.max_concurrency == defaults.max_concurrency


def test_replicas_get_distinct_seeds() -> None:
    a = pods.engine_config_from_pod(PodBuilder("a", "127.1.0.1").build())
    b = pods.engine_config_from_pod(PodBuilder("b", "127.1.0.2").build())
    assert a is not None and b is not None and a.seed != b.seed


def _config(ip: str, ttft: float = 100.0) -> EngineConfig:
    return EngineConfig(host=ip, model="m", served_model_names=("m",), ttft_ms=ttft)


def test_plan_starts_new_stops_gone_and_restarts_changed() -> None:
    running = {
        "ml/a": _config("127.1.0.1"),
        "ml/b": _config("127.1.0.2"),
        "ml/c": _config("127.1.0.3"),
    }
    desired = {
        "ml/a": _config("127.1.0.1"),
        "ml/b": _config("127.1.0.9"),
        "ml/c": _config("127.1.0.3", ttft=300.0),
        "ml/d": _config("127.1.0.4"),
    }
    changes = pods.plan_fleet(running, desired)
    assert changes == pods.FleetChanges(stop=("ml/b", "ml/c"), start=("ml/b", "ml/c", "ml/d"))


def test_plan_never_binds_one_address_twice() -> None:
    running = {"ml/old": _config("127.1.0.5")}
    desired = {
        "ml/old": _config("127.1.0.5"),
        "ml/new": _config("127.1.0.5"),
        "ml/x": _config("127.1.0.6"),
        "ml/y": _config("127.1.0.6"),
    }
    assert pods.plan_fleet(running, desired) == pods.FleetChanges(stop=(), start=("ml/x",))
    # Once the old pod is gone, its successor gets the address in the same pass.
    del desired["ml/old"]
    assert pods.plan_fleet(running, desired).start == ("ml/new", "ml/x")


def test_watch_events_fold_into_the_desired_engines() -> None:
    known: dict[str, dict[str, Any]] = {}
    a, b = PodBuilder("a", "127.1.0.1").build(), PodBuilder("b", "127.1.0.2").build()
    fleet.apply_event(known, ("SYNC", [a, b]))
    assert sorted(fleet.desired_engines(known)) == ["ml/a", "ml/b"]
    fleet.apply_event(known, ("DELETED", a))
    fleet.apply_event(known, ("MODIFIED", PodBuilder("b").status(phase="Failed").build()))
    fleet.apply_event(known, ("ADDED", PodBuilder("c", "127.1.0.3").build()))
    assert sorted(fleet.desired_engines(known)) == ["ml/c"]
    fleet.apply_event(known, ("SYNC", []))
    assert fleet.desired_engines(known) == {}


def test_load_targets_are_ready_serving_pods() -> None:
    ready = {"conditions": [{"type": "Ready", "status": "True"}]}
    not_ready = {"conditions": [{"type": "Ready", "status": "False"}]}
    pod_list = [
        PodBuilder("b", "127.1.0.2").status(**ready).build(),
        PodBuilder("a", "127.1.0.1").status(**ready).build(),
        PodBuilder("c", "127.1.0.3").status(**not_ready).build(),
        PodBuilder("d", "127.1.0.4").build(),
        PodBuilder("e", "127.1.0.5").status(**ready).label(pods.WORKER_INDEX_LABEL, "1").build(),
    ]
    assert targets.target_urls(pod_list) == ["http://127.1.0.1:8000/v1", "http://127.1.0.2:8000/v1"]


def test_slowdown_annotation_scales_the_measured_base() -> None:
    base = pods.engine_config_from_pod(PodBuilder().build())
    slow = pods.engine_config_from_pod(PodBuilder().annotation(pods.SLOWDOWN_ANNOTATION, "1.5").build())
    assert base is not None and slow is not None
    assert slow.itl_ms == base.itl_ms * 1.5 and slow.ttft_ms == base.ttft_ms * 1.5
    assert slow != base  # the fleet restarts the engine when the annotation changes


def test_measured_bases_scale_with_bandwidth_model_size_tp_and_weight_format() -> None:
    def itl(product: str, params: float, weight_bytes: float, tp: int) -> float:
        found = measured.base_latencies(product, params, weight_bytes, tp)
        assert found is not None
        return found[1]

    assert itl("NVIDIA-H100-80GB-HBM3", 70.6e9, 2, 4) < itl("NVIDIA-A100-80GB-PCIe", 70.6e9, 2, 4)
    assert itl("NVIDIA-H100-80GB-HBM3", 70.6e9, 2, 8) < itl("NVIDIA-H100-80GB-HBM3", 70.6e9, 2, 4)
    assert itl("NVIDIA-H100-80GB-HBM3", 70.6e9, 1, 4) < itl("NVIDIA-H100-80GB-HBM3", 70.6e9, 2, 4)
    assert itl("NVIDIA-H100-80GB-HBM3", 8e9, 2, 1) < itl("NVIDIA-H100-80GB-HBM3", 70.6e9, 2, 1)
    # The anchors reproduce their own measurements.
    assert itl("NVIDIA-L4", 0.494e9, 2, 1) == 5.1
    assert measured.base_latencies("NVIDIA-X9000", 8e9, 2, 1) is None
