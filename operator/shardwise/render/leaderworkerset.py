"""A replica that spans nodes, as a LeaderWorkerSet (sigs.k8s.io/lws v0.7.0): one pod group per replica.

Why LWS: a multi-node vLLM replica is N pods that live and die together; LWS gives each group a
stable leader address (LWS_LEADER_ADDRESS), a rank per pod (LWS_WORKER_INDEX) and, with
`RecreateGroupOnPodRestart`, recreates the whole group when any pod restarts. That last part is
what vllm #16259 needs: a restarted worker stays idle until the leader restarts too.

Every pod runs `shardwise-launch` (runtime/shardwise_runtime/launcher), which forms the group
and execs `vllm serve` with vLLM's own multi-node flags. So the image (spec.serving.image) must
contain both vLLM 0.32 and shardwise-launch: the shardwise runtime image (the Dockerfile's
`runtime` target, vllm/vllm-openai plus shardwise[runtime]). When the spec keeps the default
stock vLLM image, the operator's `runtime_image` setting (SHARDWISE_RUNTIME_IMAGE, set by the
Helm chart) takes its place in these pods; a custom image must bring shardwise-launch itself.

Health, group-wide:
- The leader serves HTTP and is probed on /health like a single-node pod (startup probe sized
  from the weights, render/probes.py). vLLM's API server starts only after every rank has joined.
  vLLM alone does NOT notice a rank lost mid-run (its leader answered /health 200 for minutes
  after the worker died, while requests hung), so shardwise-launch watches the group itself:
  every pod's launcher runs vLLM as a child and keeps a heartbeat connection to its peers; when
  one goes, the launcher stops its vLLM and exits, so the leader's readiness fails within one
  probe period, its container ends, and RecreateGroupOnPodRestart recreates the group.
- Workers run `vllm serve --headless`: no HTTP server, and no port of their own worth probing.
  They get no probes, deliberately: their container lives exactly as long as their launcher,
  which exits when its vLLM dies or the leader goes; before vLLM starts, a worker whose leader
  never answers exits after the group timeout, with the same effect.
"""

from __future__ import annotations

from typing import Any

from shardwise.api import names
from shardwise.api.v1alpha1 import DEFAULT_IMAGE, InferenceDeploymentSpec
from shardwise.api.engines import Engine
from shardwise.render import engine, labels
from shardwise.render.pod import Owner, build_pod_spec, object_metadata, pod_annotations
from shardwise.render.vllm_args import build_serve_args

API_VERSION = "leaderworkerset.x-k8s.io/v1"
KIND = "LeaderWorkerSet"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"  # "0" on leaders
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"  # one value per group, on every pod
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # GPU Feature Discovery: nodes sharing one NVLink fabric
LAUNCHER = "shardwise-launch"
# Long enough for a worker's node to pull a multi-gigabyte vLLM image after the leader started;
# short enough that a group missing a pod fails (and is recreated) well within the startup
# probe's allowance (at least 15 minutes, render/probes.py).
GROUP_TIMEOUT_S = 900


def workload_name(resource_name: str) -> str:
    """The LeaderWorkerSet's name: not the resource's, which the client Service keeps.

    LWS creates a headless Service named after the LeaderWorkerSet for its pods' DNS (the
    leader address); with the same name as shardwise's Service, one of the two would lose.
    """
    return names.leaderworkerset_name(resource_name)


def leader_selector(resource_name: str) -> dict[str, str]:
    """Leaders only: workers serve no HTTP, so a Service that picked them would drop requests."""
    return {**labels.selector_labels(resource_name), WORKER_INDEX_LABEL: "0"}


def build_launch_args(spec: InferenceDeploymentSpec, plan: dict[str, Any], resource_name: str,
                      role: str) -> list[str]:
    """`shardwise-launch` arguments for one pod of a group; the rank and leader come from LWS."""
    return [
        "--interconnect", plan["interconnect"],
        "--nodes", str(plan["nodesPerReplica"]),
        "--role", role,
        "--group-timeout", str(GROUP_TIMEOUT_S),
        "--", *build_serve_args(spec, plan, resource_name),
    ]


def _tp_spans_nodes(plan: dict[str, Any]) -> bool:
    # The planner lets TP cross nodes only inside one NVLink clique (GB200 NVL72).
    return int(plan["tensorParallel"]) > int(plan["gpusPerNode"])


def _keep_group_in_one_clique(pod: dict[str, Any], resource_name: str) -> None:
    """Require every pod of a group on nodes of the clique its leader landed in.

    Not LWS's `exclusive-topology` annotation: that also repels every other group from the
    clique, so one 2-tray replica would hold a whole 72-GPU NVL72 rack and the second replica the
    planner counted on would never schedule. `matchLabelKeys` (GA in Kubernetes 1.33, on by
    default since 1.31) narrows the term to the pod's own group key; the leader, first of its
    group, matches its own term and may go to any clique.
    """
    affinity = pod.setdefault("affinity", {})
    required = affinity.setdefault("nodeAffinity", {}).setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]})
    for term in required["nodeSelectorTerms"]:
        term.setdefault("matchExpressions", []).append({"key": CLIQUE_LABEL, "operator": "Exists"})
    affinity["podAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [{
        "labelSelector": {"matchLabels": labels.selector_labels(resource_name)},
        "matchLabelKeys": [GROUP_KEY_LABEL],
        "topologyKey": CLIQUE_LABEL,
    }]}


def _template(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any],
              role: str, runtime_image: str | None) -> dict[str, Any]:
    if spec.engine is Engine.vllm:
        pod = build_pod_spec(owner, spec, plan, command=[LAUNCHER],
                             args=build_launch_args(spec, plan, owner.name, role))
    else:
        # SGLang forms its group itself (--nnodes, --node-rank, --dist-init-addr: render/sglang_args.py);
        # its pods run the engine's own image, set by render/engine.py.
        command, args = engine.command_and_args(spec, plan, owner.name)
        pod = build_pod_spec(owner, spec, plan, command=command, args=args)
    if runtime_image and spec.serving.image == DEFAULT_IMAGE and spec.engine is Engine.vllm:
        # The stock vLLM image has no shardwise-launch; the runtime image is it plus the launcher.
        pod["containers"][0]["image"] = runtime_image
    if role == "worker":
        container = pod["containers"][0]
        for key in ("ports", "startupProbe", "readinessProbe", "livenessProbe"):
            del container[key]  # no HTTP server on a headless rank: see the module docstring
    if _tp_spans_nodes(plan):
        _keep_group_in_one_clique(pod, owner.name)
    return {
        "metadata": {"labels": labels.common_labels(owner.name),
                     "annotations": pod_annotations(spec, plan)},
        "spec": pod,
    }


def build_leaderworkerset(owner: Owner, spec: InferenceDeploymentSpec, plan: dict[str, Any],
                          replicas: int, *, runtime_image: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": object_metadata(owner, workload_name(owner.name)),
        "spec": {
            "replicas": replicas,
            # LeaderReady would deadlock: the leader is ready only once every worker has joined.
            "startupPolicy": "LeaderCreated",
            # As for a Deployment: surge one group and never drop below the ready count.
            "rolloutStrategy": {"type": "RollingUpdate",
                                "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0}},
            "leaderWorkerTemplate": {
                "size": int(plan["nodesPerReplica"]),
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": _template(owner, spec, plan, "leader", runtime_image),
                "workerTemplate": _template(owner, spec, plan, "worker", runtime_image),
            },
        },
    }
