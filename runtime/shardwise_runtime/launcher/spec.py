"""What the launcher will do, decided from its arguments and environment, without doing it.

Multi-node bootstrap: vLLM's own multiprocessing path (`--distributed-executor-backend mp
--nnodes N --node-rank R --master-addr LEADER`, `--headless` on ranks above 0), not Ray. Why:
- each pod's process is vLLM under its launcher, which exits when vLLM dies or a peer is lost
  (`supervise`), so the pod dies and LeaderWorkerSet's RecreateGroupOnPodRestart rebuilds the
  group (vllm #16259); with Ray the worker pods' process is `ray start --block`, which outlives
  a dead engine;
- no Ray runtime (GCS, raylets, `ray status` parsing that changes between Ray versions) to keep
  healthy, and no Ray placement decisions between the planner and the GPUs;
- the flags exist in the targeted vLLM (0.32, checked against its `--help=all` in the tests).
A replica with DP attention (`--data-parallel-size` in the serve arguments) spreads over nodes by
DP instead, vLLM's multi-node DP launch (SERVING-SHAPES.md A): every node runs its
`--data-parallel-size-local` engines; all get `--data-parallel-address LEADER
--data-parallel-rpc-port P`, the workers also `--headless --data-parallel-start-rank
rank x local` (no API server: only the leader serves HTTP, whose internal load balancer spreads
requests over every rank).
What vLLM's own path lacks is a readable error when a member never arrives (torch's store just
times out), so the launcher first forms the group itself (`rendezvous`) and names who is missing.
"""

from __future__ import annotations

import dataclasses
import enum
import os
from collections.abc import Mapping, Sequence

from shardwise_runtime import vllm_flags


class Interconnect(str, enum.Enum):
    NVSWITCH = "nvswitch"
    NVLINK = "nvlink"
    PCIE = "pcie"


class Role(str, enum.Enum):
    LEADER = "leader"
    WORKER = "worker"


class UsageError(Exception):
    """The arguments or environment cannot describe a launch; the text says what to fix."""


DEFAULT_GROUP_TIMEOUT_S = 600.0
DEFAULT_RENDEZVOUS_PORT = 29400  # torchrun's rendezvous port; vLLM uses 29500/29501
DEFAULT_MIN_SHM_MIB = 1024

# Flags the launcher owns on a multi-node launch; the same flags in the serve arguments would
# contradict the group it forms.
_MULTI_NODE_FLAGS = frozenset({"--distributed-executor-backend", "--nnodes", "-n",
                               "--node-rank", "-r", "--master-addr", "--headless",
                               "--data-parallel-address", "-dpa", "--data-parallel-rpc-port", "-dpp",
                               "--data-parallel-start-rank", "-dpr"})
_DP_FLAGS = ("--data-parallel-size", "-dp")
_DP_LOCAL_FLAGS = ("--data-parallel-size-local", "-dpl")
# vLLM's DP RPC port must be the same on every node ("All nodes must use the same port"); fixed
# here, beside the rendezvous port, so the pods' ports are known.
DEFAULT_DP_RPC_PORT = 29550
_TP_FLAGS = ("--tensor-parallel-size", "-tp")
_PP_FLAGS = ("--pipeline-parallel-size", "-pp")


@dataclasses.dataclass(frozen=True)
class LaunchInputs:
    """The launcher's own arguments; None means "from the LWS environment, else the default"."""

    interconnect: Interconnect
    serve_args: tuple[str, ...]
    nodes: int | None = None
    role: Role | None = None
    node_rank: int | None = None
    leader_address: str | None = None
    group_timeout_s: float = DEFAULT_GROUP_TIMEOUT_S
    rendezvous_port: int = DEFAULT_RENDEZVOUS_PORT
    min_shm_mib: int = DEFAULT_MIN_SHM_MIB


@dataclasses.dataclass(frozen=True)
class Rendezvous:
    """Forming a multi-node group before vLLM starts."""

    role: Role
    leader_address: str
    port: int
    nodes: int
    node_rank: int
    timeout_s: float


@dataclasses.dataclass(frozen=True)
class LaunchSpec:
    env: dict[str, str]  # variables to add; a variable already set in the pod is never replaced
    argv: list[str]  # what to exec
    rendezvous: Rendezvous | None  # None: a single-node replica, nothing to wait for
    model_path: str | None  # a local model directory that must exist, None for hub names
    min_shm_bytes: int  # 0 when the pod runs one GPU worker and NCCL needs no shared memory
    warnings: tuple[str, ...] = ()


def build_launch(inputs: LaunchInputs, env: Mapping[str, str]) -> LaunchSpec:
    """The launch for these arguments in this environment; UsageError when inconsistent."""
    serve_args = list(inputs.serve_args)
    if not serve_args or serve_args[0].startswith("-"):
        raise UsageError("the vllm serve arguments after `--` must start with the model")
    nodes = inputs.nodes if inputs.nodes is not None else _env_int(env, "LWS_GROUP_SIZE")
    nodes = 1 if nodes is None else nodes
    if nodes < 1:
        raise UsageError(f"--nodes must be at least 1, got {nodes}")
    warnings = [f"{flag} is not a vllm 0.32 serve flag; passing it on"
                for flag in vllm_flags.unknown_flags(serve_args[1:])]

    rendezvous = None
    argv = ["vllm", "serve", *serve_args]
    dp = _int_flag(serve_args, _DP_FLAGS)
    if nodes > 1:
        rendezvous = _rendezvous(inputs, env, nodes)
        if dp > 1:
            argv += data_parallel_flags(rendezvous, _dp_local(serve_args, dp, nodes))
        else:
            argv += multi_node_flags(rendezvous)
    elif inputs.role is Role.WORKER:
        raise UsageError("--role worker needs --nodes (or LWS_GROUP_SIZE) above 1")

    world = _world_size(serve_args)
    if world % nodes:
        raise UsageError(f"data x tensor x pipeline parallel size {world} does not divide over "
                         f"{nodes} nodes")
    added = interconnect_env(inputs.interconnect)
    pod_ip = env.get("POD_IP")
    if pod_ip:
        # vLLM advertises VLLM_HOST_IP to its peers; in a pod only the pod IP is both unique
        # and reachable (autodetection can pick a node-local or docker bridge address).
        added["VLLM_HOST_IP"] = pod_ip
    elif nodes > 1:
        warnings.append("POD_IP is not set (downward API status.podIP): vLLM will guess "
                        "its own address for the group")
    return LaunchSpec(
        env={k: v for k, v in added.items() if k not in env},
        argv=argv,
        rendezvous=rendezvous,
        model_path=local_model_path(serve_args[0]),
        min_shm_bytes=inputs.min_shm_mib * 2**20 if world // nodes > 1 else 0,
        warnings=tuple(warnings),
    )


def interconnect_env(interconnect: Interconnect) -> dict[str, str]:
    """NCCL settings for the GPUs' interconnect."""
    if interconnect is Interconnect.PCIE:
        # Without NVLink, NCCL's PCIe peer-to-peer is the path that hangs or corrupts on
        # machines whose PCIe switches, IOMMU or hypervisor do not really support it (common
        # for L40S/L4 cloud VMs); going through host shared memory costs little more on
        # PCIe-only GPUs and always works. A pod that knows better sets NCCL_P2P_DISABLE=0.
        return {"NCCL_P2P_DISABLE": "1"}
    # NVLink and NVSwitch: NCCL detects both, including NVLS on NVSwitch; nothing to force.
    return {}


def multi_node_flags(rendezvous: Rendezvous) -> list[str]:
    flags = ["--distributed-executor-backend", "mp", "--nnodes", str(rendezvous.nodes),
             "--node-rank", str(rendezvous.node_rank), "--master-addr", rendezvous.leader_address]
    if rendezvous.role is Role.WORKER:
        # Only the leader serves HTTP; workers run their engine ranks without an API server.
        flags.append("--headless")
    return flags


def data_parallel_flags(rendezvous: Rendezvous, local: int) -> list[str]:
    """vLLM's multi-node DP launch: every node the head's address and RPC port; workers run
    their ranks headless from `rank x local`."""
    flags = ["--data-parallel-address", rendezvous.leader_address,
             "--data-parallel-rpc-port", str(DEFAULT_DP_RPC_PORT)]
    if rendezvous.role is Role.WORKER:
        flags += ["--headless", "--data-parallel-start-rank", str(rendezvous.node_rank * local)]
    return flags


def _dp_local(serve_args: Sequence[str], dp: int, nodes: int) -> int:
    local = _int_flag(serve_args, _DP_LOCAL_FLAGS, default=0)
    if not local:
        if dp % nodes:
            raise UsageError(f"--data-parallel-size {dp} does not divide over {nodes} nodes")
        local = dp // nodes
    if local * nodes != dp:
        raise UsageError(f"--data-parallel-size-local {local} on {nodes} nodes is not "
                         f"--data-parallel-size {dp}")
    return local


def local_model_path(model: str) -> str | None:
    """The model as a local path when it is written as one; hub names (org/name) are not."""
    if model.startswith(("/", "./", "../", "~")):
        return os.path.expanduser(model)
    return None


def _rendezvous(inputs: LaunchInputs, env: Mapping[str, str], nodes: int) -> Rendezvous:
    owned = sorted({vllm_flags.flag_name(a) for a in inputs.serve_args} & _MULTI_NODE_FLAGS)
    if owned:
        raise UsageError(f"the launcher sets {', '.join(owned)} for a multi-node group; "
                         "remove them from the vllm serve arguments")
    leader = inputs.leader_address or env.get("LWS_LEADER_ADDRESS")
    if not leader:
        raise UsageError("a multi-node launch needs --leader-address (or LWS_LEADER_ADDRESS)")
    rank = inputs.node_rank
    if rank is None and inputs.role is Role.LEADER:
        rank = 0
    if rank is None:
        rank = _env_int(env, "LWS_WORKER_INDEX")
    if rank is None:
        if inputs.role is Role.WORKER:
            raise UsageError("--role worker needs --node-rank (or LWS_WORKER_INDEX)")
        rank = 0
    role = inputs.role or (Role.LEADER if rank == 0 else Role.WORKER)
    if (role is Role.LEADER) != (rank == 0):
        raise UsageError(f"node rank {rank} contradicts role {role.value}: the leader is rank 0")
    if not 0 <= rank < nodes:
        raise UsageError(f"node rank {rank} is outside a group of {nodes} nodes")
    if inputs.group_timeout_s <= 0:
        raise UsageError(f"--group-timeout must be positive, got {inputs.group_timeout_s}")
    return Rendezvous(role=role, leader_address=leader, port=inputs.rendezvous_port, nodes=nodes,
                      node_rank=rank, timeout_s=inputs.group_timeout_s)


def _world_size(serve_args: Sequence[str]) -> int:
    return (_int_flag(serve_args, _TP_FLAGS) * _int_flag(serve_args, _PP_FLAGS)
            * _int_flag(serve_args, _DP_FLAGS))


def _int_flag(args: Sequence[str], names: Sequence[str], default: int = 1) -> int:
    for i, arg in enumerate(args):
        name, sep, value = arg.partition("=")
        if name in names:
            raw = value if sep else (args[i + 1] if i + 1 < len(args) else "")
            try:
                return int(raw)
            except ValueError:
                raise UsageError(f"{name} needs an integer, got {raw!r}") from None
    return default


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise UsageError(f"{name} must be an integer, got {raw!r}") from None
