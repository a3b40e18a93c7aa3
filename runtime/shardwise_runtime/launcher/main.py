"""`shardwise-launch`: the serving container's entrypoint (the contract the operator renders).

    shardwise-launch --interconnect {nvswitch,nvlink,pcie}
                     [--nodes N] [--role {leader,worker}] [--node-rank R]
                     [--leader-address ADDR] [--group-timeout SECONDS]
                     [--rendezvous-port PORT] [--min-shm-mib MIB] [--dry-run]
                     -- MODEL [vllm serve arguments ...]

Everything after `--` is passed to `vllm serve` as it is (the model first, then the planned
flags: --tensor-parallel-size, --pipeline-parallel-size, --max-model-len, ...). The launcher adds
only the multi-node flags (--distributed-executor-backend mp --nnodes --node-rank --master-addr,
and --headless on workers), or for a DP replica (--data-parallel-size in the arguments) vLLM's
multi-node DP flags (--data-parallel-address, --data-parallel-rpc-port 29550, and --headless
--data-parallel-start-rank on workers); see `spec` for why vLLM's own multi-node path and not Ray.

Environment read (flags win):
  LWS_GROUP_SIZE      nodes in the group (default 1)
  LWS_WORKER_INDEX    node rank; 0 is the leader, which serves HTTP
  LWS_LEADER_ADDRESS  the leader's address, for --master-addr and the rendezvous
  POD_IP              exported as VLLM_HOST_IP (downward API status.podIP)
Environment set for vLLM (never overriding a variable the pod already sets):
  VLLM_HOST_IP=$POD_IP; on pcie NCCL_P2P_DISABLE=1.

Before exec it checks that a local model path (/..., ./..., ~...) exists and that /dev/shm holds
at least --min-shm-mib (default 1024) when the pod runs more than one GPU worker, then forms the
multi-node group (`rendezvous`, port --rendezvous-port, default 29400, leader to workers).
`--dry-run` prints the plan as JSON (env, argv, rendezvous, checks) and exits 0 without checks.

A single-node launch execs vLLM. A multi-node launch runs vLLM as a child and watches the other
nodes of its group over the rendezvous connections (`supervise`): when any rank's launcher goes
away, it stops vLLM and exits 68, so the leader turns NotReady within seconds instead of
answering /health for minutes while requests hang.

Exit codes (the launcher's own; once vLLM runs, its exit code is the container's):
  64  usage: arguments or LWS environment inconsistent (message says what to fix)
  65  the local model path does not exist
  66  /dev/shm too small for NCCL (mount an emptyDir with medium: Memory at /dev/shm)
  67  the group did not form in --group-timeout (a worker never joined, or the leader never answered)
  68  a node of the running group was lost (its launcher exited or stopped answering)
  127 the vllm executable is not on PATH
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import socket
import sys
from collections.abc import Callable, Mapping
from typing import NoReturn

from shardwise_runtime.launcher import rendezvous, spec, supervise

EXIT_USAGE = 64
EXIT_MODEL_MISSING = 65
EXIT_SHM_TOO_SMALL = 66
EXIT_GROUP_TIMEOUT = 67
EXIT_NO_VLLM = 127

log = logging.getLogger("shardwise.launch")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse exits 2; the contract promises 64 for every usage error.
        raise spec.UsageError(message)


def parse_args(argv: list[str]) -> tuple[spec.LaunchInputs, bool]:
    """The launch inputs and whether this is a dry run."""
    if "--" not in argv:
        raise spec.UsageError("expected `-- MODEL [vllm serve arguments]` after the options")
    split = argv.index("--")
    parser = _Parser(prog="shardwise-launch", add_help=False)
    parser.add_argument("--interconnect", required=True, choices=[i.value for i in spec.Interconnect])
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--role", choices=[r.value for r in spec.Role])
    parser.add_argument("--node-rank", type=int)
    parser.add_argument("--leader-address")
    parser.add_argument("--group-timeout", type=float, default=spec.DEFAULT_GROUP_TIMEOUT_S)
    parser.add_argument("--rendezvous-port", type=int, default=spec.DEFAULT_RENDEZVOUS_PORT)
    parser.add_argument("--min-shm-mib", type=int, default=spec.DEFAULT_MIN_SHM_MIB)
    parser.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv[:split])
    inputs = spec.LaunchInputs(
        interconnect=spec.Interconnect(args.interconnect),
        serve_args=tuple(argv[split + 1:]),
        nodes=args.nodes,
        role=spec.Role(args.role) if args.role else None,
        node_rank=args.node_rank,
        leader_address=args.leader_address,
        group_timeout_s=args.group_timeout,
        rendezvous_port=args.rendezvous_port,
        min_shm_mib=args.min_shm_mib,
    )
    return inputs, args.dry_run


def describe(launch: spec.LaunchSpec) -> str:
    """The dry-run output: everything the launcher would do, as JSON."""
    plan = dataclasses.asdict(launch)
    plan["warnings"] = list(launch.warnings)
    return json.dumps(plan, indent=2, default=str)


def check_model_path(launch: spec.LaunchSpec) -> str | None:
    if launch.model_path is not None and not os.path.exists(launch.model_path):
        return (f"model path {launch.model_path} does not exist in this container: "
                "check the volume that should hold it")
    return None


def check_shm(launch: spec.LaunchSpec, shm_bytes: Callable[[], int]) -> str | None:
    if launch.min_shm_bytes == 0:
        return None
    size = shm_bytes()
    if size < launch.min_shm_bytes:
        return (f"/dev/shm is {size // 2**20} MiB; NCCL between this pod's GPUs needs at least "
                f"{launch.min_shm_bytes // 2**20} MiB: mount an emptyDir with medium: Memory at "
                "/dev/shm (or lower --min-shm-mib)")
    return None


def dev_shm_bytes() -> int:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return 0
    return stat.f_blocks * stat.f_frsize


Peers = dict[int, socket.socket]


def form_group(group: spec.Rendezvous, bind: str = "") -> Peers:
    """The open connections to the other nodes, by node rank (the leader's, for a worker)."""
    if group.role is spec.Role.LEADER:
        log.info("waiting for %d workers on port %d (up to %gs)", group.nodes - 1, group.port,
                 group.timeout_s)
        return rendezvous.wait_for_workers(rendezvous.listen(group.port, bind), group.nodes,
                                           group.timeout_s)
    log.info("joining leader %s:%d as node rank %d", group.leader_address, group.port,
             group.node_rank)
    return {0: rendezvous.join_leader(group.leader_address, group.port, group.node_rank,
                                      group.timeout_s)}


def launch(argv: list[str], env: Mapping[str, str], out: Callable[[str], object] = print,
           shm_bytes: Callable[[], int] = dev_shm_bytes,
           group: Callable[[spec.Rendezvous], Peers | None] | None = None,
           execvpe: Callable[[str, list[str], dict[str, str]], object] = os.execvpe,
           run_group: Callable[[list[str], dict[str, str], Peers], int] = supervise.run_group) -> int:
    """Everything but the process-wide setup; returns an exit code when it does not exec."""
    try:
        inputs, dry_run = parse_args(argv)
        plan = spec.build_launch(inputs, env)
    except spec.UsageError as error:
        log.error("%s", error)
        return EXIT_USAGE
    for warning in plan.warnings:
        log.warning("%s", warning)
    if dry_run:
        out(describe(plan))
        return 0
    if (problem := check_model_path(plan)) is not None:
        log.error("%s", problem)
        return EXIT_MODEL_MISSING
    if (problem := check_shm(plan, shm_bytes)) is not None:
        log.error("%s", problem)
        return EXIT_SHM_TOO_SMALL
    peers: Peers | None = None
    if plan.rendezvous is not None:
        if group is None:
            # In a pod the pod IP is the one address peers can reach; binding only it lets
            # several groups share one machine (the local fleet).
            bind = env.get("POD_IP", "")
            group = lambda g: form_group(g, bind)  # noqa: E731
        try:
            peers = group(plan.rendezvous)
        except rendezvous.GroupTimeout as error:
            log.error("%s", error)
            return EXIT_GROUP_TIMEOUT
    if peers:
        log.info("run %s, watching the group", " ".join(plan.argv))
        try:
            return run_group(plan.argv, {**env, **plan.env}, peers)
        except FileNotFoundError:
            log.error("%s is not on PATH: is this the vLLM image?", plan.argv[0])
            return EXIT_NO_VLLM
    log.info("exec %s", " ".join(plan.argv))
    try:
        execvpe(plan.argv[0], plan.argv, {**env, **plan.env})
    except FileNotFoundError:
        log.error("%s is not on PATH: is this the vLLM image?", plan.argv[0])
        return EXIT_NO_VLLM
    return 0  # only reached when execvpe is replaced (tests)


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return launch(sys.argv[1:] if argv is None else argv, os.environ)
