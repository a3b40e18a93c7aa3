"""The launcher shell: argument parsing, dry run, checks and their exit codes, exec."""

import json
import socket
import threading
from pathlib import Path

import pytest

from shardwise_runtime.launcher import main, rendezvous, spec

GiB = 2**30


class Exec:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[str], dict[str, str]]] = []

    def __call__(self, file: str, argv: list[str], env: dict[str, str]) -> None:
        self.calls.append((file, argv, env))


def run(argv: list[str], env: dict[str, str] | None = None, shm: int = 8 * GiB,
        group_error: str | None = None) -> tuple[int, Exec, list[str]]:
    execs, printed = Exec(), list[str]()

    def group(plan: spec.Rendezvous) -> None:
        if group_error:
            raise rendezvous.GroupTimeout(group_error)

    code = main.launch(argv, env or {}, out=printed.append, shm_bytes=lambda: shm, group=group,
                       execvpe=execs)
    return code, execs, printed


def test_execs_vllm_with_the_planned_environment(tmp_path: Path) -> None:
    code, execs, _ = run(["--interconnect", "pcie", "--", str(tmp_path), "-tp", "2"],
                         {"POD_IP": "10.0.0.9", "HOME": "/root"})
    assert code == 0
    [(file, argv, env)] = execs.calls
    assert (file, argv) == ("vllm", ["vllm", "serve", str(tmp_path), "-tp", "2"])
    assert env == {"POD_IP": "10.0.0.9", "HOME": "/root", "VLLM_HOST_IP": "10.0.0.9",
                   "NCCL_P2P_DISABLE": "1"}


def test_dry_run_prints_the_plan_and_execs_nothing() -> None:
    code, execs, printed = run(
        ["--interconnect", "nvswitch", "--dry-run", "--", "meta-llama/Llama-3.1-405B-Instruct",
         "-tp", "8", "-pp", "2"],
        {"LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": "1", "LWS_LEADER_ADDRESS": "lead"},
        shm=0)
    assert (code, execs.calls) == (0, [])
    plan = json.loads(printed[0])
    assert plan["argv"][-1] == "--headless"
    assert plan["rendezvous"]["role"] == "worker"
    assert plan["min_shm_bytes"] == GiB
    assert plan["warnings"] == ["POD_IP is not set (downward API status.podIP): vLLM will "
                                "guess its own address for the group"]


@pytest.mark.parametrize("argv", [
    ["--interconnect", "pcie", "m/m"],                       # no `--`
    ["--", "m/m"],                                           # no --interconnect
    ["--interconnect", "infiniband", "--", "m/m"],           # not a choice
    ["--interconnect", "pcie", "--nodes", "x", "--", "m/m"],  # not an integer
    ["--interconnect", "pcie", "--"],                        # no model
])
def test_usage_errors_exit_64(argv: list[str]) -> None:
    assert run(argv)[0] == main.EXIT_USAGE


def test_missing_local_model_exits_65(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    missing = str(tmp_path / "nowhere")
    code, execs, _ = run(["--interconnect", "nvswitch", "--", missing])
    assert (code, execs.calls) == (main.EXIT_MODEL_MISSING, [])
    assert f"model path {missing} does not exist" in caplog.text


def test_small_shared_memory_exits_66_with_the_fix(caplog: pytest.LogCaptureFixture) -> None:
    code, _, _ = run(["--interconnect", "nvlink", "--", "m/m", "-tp", "4"], shm=64 * 2**20)
    assert code == main.EXIT_SHM_TOO_SMALL
    assert "/dev/shm is 64 MiB" in caplog.text and "medium: Memory" in caplog.text


def test_small_shared_memory_is_fine_for_one_gpu() -> None:
    assert run(["--interconnect", "nvlink", "--", "m/m"], shm=64 * 2**20)[0] == 0


def test_group_timeout_exits_67(caplog: pytest.LogCaptureFixture) -> None:
    message = "worker never joined: 1 of 2 nodes after 600s (missing node ranks: 1)"
    code, execs, _ = run(["--interconnect", "nvswitch", "--nodes", "2", "--leader-address",
                          "lead", "--", "m/m", "-tp", "8", "-pp", "2"], group_error=message)
    assert (code, execs.calls) == (main.EXIT_GROUP_TIMEOUT, [])
    assert message in caplog.text


def test_vllm_missing_from_path_exits_127() -> None:
    def no_vllm(file: str, argv: list[str], env: dict[str, str]) -> None:
        raise FileNotFoundError(file)

    code = main.launch(["--interconnect", "nvlink", "--", "m/m"], {}, shm_bytes=lambda: GiB,
                       execvpe=no_vllm)
    assert code == main.EXIT_NO_VLLM


def test_leader_and_worker_form_the_group_over_localhost_then_run_vllm_watching_it() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    common = ["--interconnect", "nvswitch", "--leader-address", "127.0.0.1",
              "--rendezvous-port", port, "--group-timeout", "10", "--",
              "meta-llama/Llama-3.1-405B-Instruct", "-tp", "8", "-pp", "2"]
    results: dict[str, tuple[int, Exec]] = {}

    def start(role: str, index: str) -> None:
        runs = Exec()

        def run_group(argv: list[str], env: dict[str, str], peers: dict[int, socket.socket]) -> int:
            runs(argv[0], argv, {"peers": ",".join(map(str, sorted(peers)))})
            return 0

        env = {"LWS_GROUP_SIZE": "2", "LWS_WORKER_INDEX": index}
        results[role] = (main.launch(common, env, shm_bytes=lambda: 8 * GiB, execvpe=Exec(),
                                     run_group=run_group), runs)

    pods = [threading.Thread(target=start, args=a) for a in (("leader", "0"), ("worker", "1"))]
    for pod in pods:
        pod.start()
    for pod in pods:
        pod.join(timeout=20)
    assert results["leader"][0] == results["worker"][0] == 0
    assert "--headless" not in results["leader"][1].calls[0][1]
    assert results["worker"][1].calls[0][1][-1] == "--headless"
    # Each side watches the other: the leader its worker (rank 1), the worker its leader.
    assert results["leader"][1].calls[0][2] == {"peers": "1"}
    assert results["worker"][1].calls[0][2] == {"peers": "0"}
