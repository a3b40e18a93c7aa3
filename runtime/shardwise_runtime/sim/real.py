"""Which pods the local fleet serves with the REAL vLLM engine, and exactly how: pure functions.

A pod asks for the real engine by its container image: `LOCAL_VLLM_CPU_IMAGE` stands for "vLLM's
CPU build", which hack/install-vllm.sh installs outside the clone (the local fleet has no container
runtime, so the image name is the request, not something pulled). The fleet then runs the pod's
container command and args exactly as the operator rendered them, changing only what cannot hold
on a CPU-only loopback host, and lists every change (`RealLaunch.changes`) so a log reader sees
the difference between what was rendered and what ran:
- the executable: `vllm` is the installed engine; `shardwise-launch` is this repository's launcher
  (it execs `vllm` from PATH, which starts with the engine's venv);
- the model: hub names cannot be downloaded here, so a tiny local model takes their place: the
  tiny mixture of experts where the argv asks for expert or data parallelism (the operator renders
  those only for MoE models), else the tiny Llama;
- the bind address: every pod listens on port 8000, so each engine binds its own pod IP
  (`--host`), as a container's network namespace would give it for free;
- quantization: the CPU build has no fp8/AWQ/GPTQ kernels for a random tiny model, so the flag is
  dropped (it is still checked against vLLM's real parser in the tests);
- the environment: downward-API values resolved from the pod, Secrets left out (no hub access),
  and CPU device settings added (KV cache space, OpenMP threads and core binding, offline hub);
- multi-node: `--master-port` gets a free port (vLLM's default one would be shared by every group
  on this one machine) and the LWS leader address, a DNS name in a cluster, the leader's pod IP.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

from shardwise_runtime.sim import loopback

LOCAL_VLLM_CPU_IMAGE = "shardwise.local/vllm-cpu:0.32.0"
MODEL_NAME = "tiny-llama-v1"  # written by hack/install-vllm.sh (hack/make-tiny-model.py)
MOE_MODEL_NAME = "tiny-moe-v1"  # written by hack/install-vllm.sh (hack/make-tiny-moe.py)
KV_CACHE_GIB = "1"  # the tiny model needs 4 KiB per token: 1 GiB holds any rendered context
# Offline hub, no usage reporting: nothing may leave the machine.
_QUIET_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
              "DO_NOT_TRACK": "1"}
_DROPPED_FLAGS = ("--quantization", "-q")
_LAUNCHER = "shardwise-launch"
_TP_FLAGS = ("--tensor-parallel-size", "-tp")
_PP_FLAGS = ("--pipeline-parallel-size", "-pp")
_DP_FLAGS = ("--data-parallel-size", "-dp")
_DP_LOCAL_FLAGS = ("--data-parallel-size-local", "-dpl")
_EP_FLAGS = ("--enable-expert-parallel", "-ep")


@dataclasses.dataclass(frozen=True)
class Install:
    """Where hack/install-vllm.sh put the engine, and this repository's launcher."""

    home: pathlib.Path
    launcher: str  # path of the shardwise-launch console script

    @property
    def bin_dir(self) -> pathlib.Path:
        return self.home / "venv" / "bin"

    @property
    def vllm(self) -> str:
        return str(self.bin_dir / "vllm")

    @property
    def model(self) -> str:
        return str(self.home / "models" / MODEL_NAME)

    @property
    def moe_model(self) -> str:
        return str(self.home / "models" / MOE_MODEL_NAME)


@dataclasses.dataclass(frozen=True)
class Probe:
    """An httpGet probe as the kubelet runs it."""

    path: str
    port: int
    period_s: float
    failure_threshold: int
    timeout_s: float
    initial_delay_s: float = 0.0


@dataclasses.dataclass(frozen=True)
class RealLaunch:
    """One container process: what to run, with what, and how it is probed."""

    host: str  # the pod IP
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    changes: tuple[str, ...]  # what differs from the rendered container, one sentence each
    startup: Probe | None = None
    readiness: Probe | None = None
    liveness: Probe | None = None


def wants_real_engine(pod: Mapping[str, Any]) -> bool:
    containers = (pod.get("spec") or {}).get("containers") or []
    return any(c.get("image") == LOCAL_VLLM_CPU_IMAGE for c in containers)


def _probe(spec: Mapping[str, Any] | None, ports: Mapping[str, int]) -> Probe | None:
    if not spec or "httpGet" not in spec:
        return None
    get = spec["httpGet"]
    port = get.get("port", 80)
    port = ports.get(port, 0) if isinstance(port, str) and not port.isdigit() else int(port)
    return Probe(path=get.get("path", "/"), port=int(port), period_s=float(spec.get("periodSeconds", 10)),
                 failure_threshold=int(spec.get("failureThreshold", 3)),
                 timeout_s=float(spec.get("timeoutSeconds", 1)),
                 initial_delay_s=float(spec.get("initialDelaySeconds", 0)))


def _flag_value(args: Sequence[str], names: Sequence[str]) -> str | None:
    for i, arg in enumerate(args):
        name, eq, value = arg.partition("=")
        if name in names:
            return value if eq else (args[i + 1] if i + 1 < len(args) else None)
    return None


def _drop_flags(args: list[str], names: Sequence[str]) -> tuple[list[str], list[str]]:
    """args without the named flags (and their values); the dropped items."""
    out, dropped, skip = [], [], False
    for i, arg in enumerate(args):
        if skip:
            dropped.append(arg)
            skip = False
            continue
        name, eq, _ = arg.partition("=")
        if name in names:
            dropped.append(arg)
            skip = not eq and i + 1 < len(args) and not args[i + 1].startswith("-")
            continue
        out.append(arg)
    return out, dropped


def _as_int(value: str | None) -> int:
    return int(value) if value and value.isdigit() else 1


def world_size_per_pod(serve_args: Sequence[str], nodes: int) -> int:
    """Engine ranks in one pod: TP x PP over the pods, times the DP engines the pod runs (each DP
    engine has its own TP ranks: vLLM's --data-parallel-size-local, else DP over the pods)."""
    world = _as_int(_flag_value(serve_args, _TP_FLAGS)) * _as_int(_flag_value(serve_args, _PP_FLAGS))
    dp = _as_int(_flag_value(serve_args, _DP_FLAGS))
    if dp > 1:
        dp_local = _flag_value(serve_args, _DP_LOCAL_FLAGS)
        return world * (_as_int(dp_local) if dp_local else max(dp // max(nodes, 1), 1))
    return max(world // max(nodes, 1), 1)


def wants_moe(serve_args: Sequence[str]) -> bool:
    """Expert or data parallelism in the argv: the operator renders them only for MoE models."""
    return any(arg.partition("=")[0] in _EP_FLAGS for arg in serve_args) or _as_int(
        _flag_value(serve_args, _DP_FLAGS)) > 1


def cpu_env(ranks: int, cpus: int, threads: int) -> dict[str, str]:
    """vLLM CPU settings for `ranks` engine processes in one pod on a `cpus`-core machine.

    VLLM_CPU_OMP_THREADS_BIND gives each rank its own core list ("0|1" for two ranks on two
    cores); with more ranks than cores they share cores round-robin. OMP threads stay low because
    the machine is shared with the control plane and other tests.
    """
    binds = "|".join(str(rank % max(cpus, 1)) for rank in range(ranks))
    return {"VLLM_CPU_KVCACHE_SPACE": KV_CACHE_GIB, "VLLM_CPU_OMP_THREADS_BIND": binds,
            "OMP_NUM_THREADS": str(threads), **_QUIET_ENV}


def _local_hub(endpoint: str | None) -> bool:
    if not endpoint:
        return False
    try:
        loopback.require_loopback_url(endpoint)
    except ValueError:
        return False
    return True


def _env_value(item: Mapping[str, Any], pod: Mapping[str, Any]) -> str | None:
    if "value" in item:
        return str(item["value"])
    field = ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    known = {"status.podIP": status.get("podIP"), "metadata.name": meta.get("name"),
             "metadata.namespace": meta.get("namespace"), "metadata.uid": meta.get("uid"),
             "status.hostIP": status.get("hostIP")}
    value = known.get(field or "")
    return None if value is None else str(value)


def real_launch(pod: Mapping[str, Any], install: Install, *, base_env: Mapping[str, str],
                cpus: int, threads: int = 1, master_port: int | None = None,
                leader_ip: str | None = None) -> RealLaunch | None:
    """The process for the pod's vLLM container, or None when the pod cannot run one yet.

    `base_env` is the fleet's own environment (PATH, HOME); `master_port` a free port for a
    multi-node group's vLLM store; `leader_ip` the group leader's pod IP (multi-node pods).
    """
    status = pod.get("status") or {}
    host = status.get("podIP")
    container = next((c for c in (pod.get("spec") or {}).get("containers") or []
                      if c.get("image") == LOCAL_VLLM_CPU_IMAGE), None)
    if not host or container is None:
        return None
    argv = [*(container.get("command") or []), *(container.get("args") or [])]
    if not argv:
        return None
    changes: list[str] = []
    program = pathlib.PurePath(argv[0]).name
    if program == "vllm" and len(argv) > 2 and argv[1] == "serve":
        head, serve_args, tail_sep = [install.vllm, "serve"], argv[2:], []
        changes.append(f"vllm -> {install.vllm}")
    elif program == _LAUNCHER and "--" in argv:
        split = argv.index("--")
        head, serve_args, tail_sep = [install.launcher, *argv[1:split]], argv[split + 1:], ["--"]
        changes.append(f"{_LAUNCHER} -> {install.launcher}")
    else:
        return None  # not a vLLM container the fleet knows how to run
    if serve_args and not serve_args[0].startswith("-"):
        model = install.moe_model if wants_moe(serve_args) else install.model
        if serve_args[0] != model:
            kind = " (a mixture of experts: the argv asks for EP or DP)" if model == install.moe_model else ""
            changes.append(f"model {serve_args[0]} -> {model}{kind} (no hub download here)")
        serve_args = [model, *serve_args[1:]]
    serve_args, dropped = _drop_flags(serve_args, _DROPPED_FLAGS)
    if dropped:
        changes.append(f"dropped {' '.join(dropped)} (no such kernel in vLLM's CPU build)")
    if _flag_value(serve_args, ("--host",)) is None:
        serve_args += ["--host", host]
        changes.append(f"added --host {host} (every pod listens on port 8000 of one machine)")

    env: dict[str, str] = dict(base_env)
    for item in container.get("env") or []:
        value = _env_value(item, pod)
        if value is None:
            changes.append(f"env {item.get('name')} left out (Secrets and unknown fields are not read)")
        else:
            env[item["name"]] = value
    nodes = 1
    if program == _LAUNCHER:
        nodes_raw = _flag_value(argv[1:argv.index("--")], ("--nodes",)) or env.get("LWS_GROUP_SIZE") or "1"
        nodes = int(nodes_raw) if nodes_raw.isdigit() else 1
        if nodes > 1:
            if leader_ip is None:
                return None  # the leader has no IP yet
            if env.get("LWS_LEADER_ADDRESS") != leader_ip:
                changes.append(f"LWS_LEADER_ADDRESS {env.get('LWS_LEADER_ADDRESS')} -> {leader_ip} "
                               "(no cluster DNS here)")
                env["LWS_LEADER_ADDRESS"] = leader_ip
            if master_port is not None and _flag_value(serve_args, ("--master-port",)) is None:
                serve_args += ["--master-port", str(master_port)]
                changes.append(f"added --master-port {master_port} (groups share one machine)")
    device = cpu_env(world_size_per_pod(serve_args, nodes), cpus, threads)
    env.update(device)
    if _local_hub(env.get("HF_ENDPOINT")):
        # A hub on this machine (tests' sim hub): the engine may fetch from it (LoRA adapters by
        # hub id), and still nothing leaves the machine.
        for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            device.pop(name, None)
            env.pop(name, None)
        changes.append(f"hub online: HF_ENDPOINT {env['HF_ENDPOINT']} is on this machine")
    env["PATH"] = f"{install.bin_dir}:{base_env.get('PATH', '/usr/bin:/bin')}"
    changes.append("env " + " ".join(f"{k}={v}" for k, v in sorted(device.items()))
                   + f", PATH starts with {install.bin_dir} (CPU device)")

    ports = {p["name"]: int(p["containerPort"]) for p in container.get("ports") or [] if p.get("name")}
    return RealLaunch(
        host=str(host), argv=tuple([*head, *tail_sep, *serve_args]), env=tuple(sorted(env.items())),
        changes=tuple(changes), startup=_probe(container.get("startupProbe"), ports),
        readiness=_probe(container.get("readinessProbe"), ports),
        liveness=_probe(container.get("livenessProbe"), ports))
