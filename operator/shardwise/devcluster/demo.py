"""`make demo`: a local control plane with a simulated GPU fleet, the operator, and live traffic.

Starts the cluster (building it first if needed), installs every CRD the chart ships, runs
`shardwise run`, starts the simulated vLLM fleet (one engine per serving pod, on the pod's loopback
IP), runs the gateway with API keys and a local Redis (Debian's redis-server) for its quotas, makes
demo keys, applies examples/, drives load at each model with a key (and one small-quota key past
its limit, so 429s show on the console), prints the OpenAI base URL, the console URL, a key and a
curl line, and prints `kubectl get infd -A` until Ctrl-C. One more
example (examples/model-cache/) is served from the model cache: a local hub serves its weights,
the downloader pod runs as a real process, and its progress shows in the Download column. Every process
it started is stopped on the way out.
"""

from __future__ import annotations

import argparse
import pathlib
import signal
import subprocess
import sys
import time

import yaml

from shardwise.devcluster.cluster import LocalCluster
from shardwise.devcluster.gateway import FrontDoor
from shardwise.devcluster.processes import Process, free_port
from shardwise.devcluster.redis import RedisServer
from shardwise_runtime.sim.real import LOCAL_VLLM_CPU_IMAGE

ROOT = pathlib.Path(__file__).resolve().parents[3]


def _python(*args: str) -> list[str]:
    return [sys.executable, *args]


def _load_profile(doc: dict) -> list[tuple[float, float]]:
    """(requests/s, seconds) phases; the autoscaled example gets a surge and a lull.

    One simulated replica of the example saturates near 10 requests/s, so the surge needs two or
    three replicas and the lull lets shardwise scale back down after the stabilization window.
    A deployment on the real engine (a tiny model on two shared CPU cores) gets one request/s.
    """
    if (doc["spec"].get("serving") or {}).get("image") == LOCAL_VLLM_CPU_IMAGE:
        return [(1, 1800)]
    if (doc["spec"].get("autoscaling") or {}).get("minReplicas") == 0:
        # Visits with idle gaps longer than scaleToZeroAfterSeconds: it goes to zero between
        # them and each visit's first request wakes it through the gateway.
        return [(1, 30), (0, 180)] * 10
    if doc["spec"].get("autoscaling"):
        return [(3, 60), (20, 180), (3, 1800)]
    return [(3, 1800)]


def _start_load(cluster: LocalCluster, doc: dict, log_dir: pathlib.Path, base_url: str, api_key: str, *,
                name: str = "", profile: list[tuple[float, float]] | None = None) -> Process:
    """The example's traffic, through the gateway: one base URL, the model picked by name, a demo key
    (in the environment, not on the command line)."""
    name = name or doc["metadata"]["name"]
    served = doc["spec"]["model"].get("servedName") or doc["metadata"]["name"]
    phases = " ; ".join(
        f"sleep {seconds}" if rps == 0 else
        f"{sys.executable} -m shardwise_runtime.sim.server load --base-url {base_url} "
        f"--model {served} --rps {rps} --duration {seconds} --max-tokens 32 >/dev/null"
        for rps, seconds in profile or _load_profile(doc))
    process = Process(f"load-{name}", ["bash", "-c", phases], log_dir / f"load-{name}.log",
                      env={"OPENAI_API_KEY": api_key})
    process.start()
    return process


# The demo's keys (docs/gateway.md "API keys and quotas"): `team` opens the console and has no
# limits; `trial` gets TRIAL_RPM requests a minute and is sent one a second, so it meets its limit
# within seconds of its first request and the console shows its 429s.
KEYS_NAMESPACE, TRIAL_RPM = "default", 10


def _make_key(cluster: LocalCluster, name: str, **spec: object) -> str:
    """A Secret made with `kubectl create secret generic` (never client-side apply: no second copy of
    the key in an annotation), labelled for the gateway, and its APIKey."""
    import secrets

    token = f"sk-demo-{name}-{secrets.token_hex(12)}"
    ns = ("-n", KEYS_NAMESPACE)
    cluster.kubectl(*ns, "create", "secret", "generic", f"{name}-key", f"--from-literal=key={token}")
    cluster.kubectl(*ns, "label", "secret", f"{name}-key", "shardwise.io/api-key=true")
    cluster.kubectl(*ns, "apply", "-f", "-", input=yaml.safe_dump(
        {"apiVersion": "shardwise.io/v1alpha1", "kind": "APIKey", "metadata": {"name": name},
         "spec": {"secretName": f"{name}-key", **spec}}))
    return token


def _always_on(docs: list[dict], real_engine: list[str]) -> dict:
    """The example the trial key calls: one that never scales to zero and runs on the simulator."""
    for doc in docs:
        if doc["metadata"]["name"] not in real_engine and (doc["spec"].get("autoscaling") or {}).get("minReplicas") != 0:
            return doc
    return docs[0]


CACHE_EXAMPLE = ROOT / "examples/model-cache/tiny-llama.yaml"
# The demo's hub serves the cached example's weights slowly enough to watch: four shards of
# 64 MB at 1 MB/s each, about a minute of `Downloading NN% Ns left`.
HUB_THROTTLE_BPS, TINY_MODEL_BYTES = 1_000_000, 256_000_000


def _start_model_cache(cluster: LocalCluster, work_dir: pathlib.Path, logs: pathlib.Path) -> str:
    """A local hub with the example's tiny model, a storage class whose one hostPath volume
    stands for the cache disk (no provisioner runs here), and the runner of downloader pods."""
    port = free_port()
    spec = yaml.safe_load(CACHE_EXAMPLE.read_text())["spec"]
    repo = spec["model"]["name"]
    for adapter in spec.get("adapters") or ():  # the example's adapters, on the same hub
        subprocess.run(_python(str(ROOT / "hack/make-tiny-lora.py"), "--out",
                               str(work_dir / "hub" / adapter["source"]["repo"]), "--rank",
                               str(adapter.get("rank", 8))), check=True, capture_output=True, timeout=60)
    hub = Process("hub", _python("-m", "shardwise_runtime.sim.server", "hub", "--root", str(work_dir / "hub"),
                                 "--port", str(port), "--throttle-bps", str(HUB_THROTTLE_BPS), "--tiny-model", repo,
                                 "--tiny-model-bytes", str(TINY_MODEL_BYTES)), logs / "hub.log")
    pods = Process("downloader-pods", _python("-m", "shardwise_runtime.sim.server", "pods", "--kubeconfig",
                                              str(cluster.user_kubeconfig("shardwise-sim")), "--work-dir",
                                              str(work_dir / "pods")), logs / "downloader-pods.log")
    for process in (hub, pods):
        process.start()
        cluster.processes.append(process)
    volume = work_dir / "volumes" / "cache-1"
    volume.mkdir(parents=True, exist_ok=True)
    cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all([
        {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "local-cache"},
         "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"},
        {"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "local-cache-1"},
         "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteMany", "ReadOnlyMany"],
                  "storageClassName": "local-cache", "persistentVolumeReclaimPolicy": "Retain",
                  "hostPath": {"path": str(volume)}}}]))
    return f"http://127.0.0.1:{port}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topology", type=pathlib.Path, default=ROOT / "tests/fixtures/clusters/default.yaml")
    parser.add_argument("--examples", type=pathlib.Path, default=ROOT / "examples")
    parser.add_argument("--work-dir", type=pathlib.Path, default=ROOT / ".demo")
    parser.add_argument("--refresh-seconds", type=float, default=10.0)
    parser.add_argument("--duration", type=float, default=0, help="stop after this many seconds (0: until Ctrl-C)")
    parser.add_argument("--real-engine", action="append", default=[], metavar="NAME",
                        help="serve this example with the real vLLM CPU engine (a tiny local model; "
                             "installed by hack/install-vllm.sh on first use)")
    args = parser.parse_args(argv)

    stop = False

    def request_stop(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)

    import shutil
    shutil.rmtree(args.work_dir, ignore_errors=True)
    started = time.monotonic()
    print("starting the local control plane (the first run builds it from Go modules: ~20 minutes)...", flush=True)
    cluster = LocalCluster(args.work_dir)
    try:
        cluster.start()
        nodes = cluster.add_nodes(args.topology)
        for crd in sorted((ROOT / "charts/shardwise/files").glob("*.shardwise.io.yaml")):  # every CRD the chart ships
            cluster.install_crd(crd)
        if "lws-crd.yaml" in cluster.bins:
            cluster.install_crd(cluster.bins["lws-crd.yaml"])
        print(f"control plane up in {time.monotonic() - started:.0f}s with {len(nodes)} simulated GPU nodes", flush=True)
        logs = cluster.log_dir
        hub_url = _start_model_cache(cluster, args.work_dir, logs)
        real_engine: list[str] = []
        if args.real_engine:
            print("installing the real vLLM engine if needed (hack/install-vllm.sh; cold: ~6 minutes)...", flush=True)
            home = subprocess.run(["bash", str(ROOT / "hack/install-vllm.sh")], check=True, stdout=subprocess.PIPE,
                                  text=True).stdout.strip().splitlines()[-1]
            real_engine = ["--real-engine-home", home, "--log-dir", str(logs / "real-engine")]
        operator = Process("operator", _python("-m", "shardwise.cli", "run", "--resync-seconds", "10",
                                               "--health-port", str(free_port())),
                           logs / "operator.log", env={"KUBECONFIG": str(cluster.user_kubeconfig("shardwise-operator")),
                                                       "SHARDWISE_METRICS_INTERVAL_SECONDS": "5",
                                                       "SHARDWISE_METRICS_WINDOW_SECONDS": "60",
                                                       "SHARDWISE_HUB_ENDPOINT": hub_url})
        fleet = Process("sim-fleet", _python("-m", "shardwise_runtime.sim.server", "fleet", "--kubeconfig",
                                             str(cluster.user_kubeconfig("shardwise-sim")), *real_engine),
                        logs / "sim-fleet.log")
        for process in (operator, fleet):
            process.start()
            cluster.processes.append(process)
        redis = RedisServer(logs)
        cluster.processes.append(redis.process)
        redis.start()
        gateway = FrontDoor(cluster.kubeconfig, logs, name="gateway",
                            extra_args=("--auth", "--redis-url", redis.url, "--key-status-interval", "5",
                                        "--lease-namespace", KEYS_NAMESPACE))
        cluster.processes += [gateway.gateway, gateway.envoy]
        gateway.start()
        team = _make_key(cluster, "team", console=True)
        trial = _make_key(cluster, "trial", requestsPerMinute=TRIAL_RPM)

        docs = [yaml.safe_load(p.read_text()) for p in sorted(args.examples.glob("*.yaml"))]
        for doc in docs:
            if doc["metadata"]["name"] in args.real_engine:
                # The pod image asks the local fleet for the real engine (see shardwise_runtime.sim.real).
                doc["spec"].setdefault("serving", {})["image"] = LOCAL_VLLM_CPU_IMAGE
        unknown = set(args.real_engine) - {doc["metadata"]["name"] for doc in docs}
        if unknown:
            raise SystemExit(f"--real-engine: no example named {', '.join(sorted(unknown))}")
        cluster.kubectl("apply", "-f", "-", input=yaml.safe_dump_all(docs))
        cluster.kubectl("apply", "-f", str(CACHE_EXAMPLE))
        for doc in docs:
            cluster.processes.append(_start_load(cluster, doc, logs, gateway.base_url, team))
        trial_doc = _always_on(docs, args.real_engine)
        cluster.processes.append(_start_load(cluster, trial_doc, logs, gateway.base_url, trial, name="trial-key",
                                             profile=[(1, 1800)]))
        trial_model = trial_doc["spec"]["model"].get("servedName") or trial_doc["metadata"]["name"]

        print(f"\nOPENAI_BASE_URL={gateway.base_url}   (one endpoint for every model: "
              f"{', '.join(d['spec']['model'].get('servedName') or d['metadata']['name'] for d in docs)})")
        print(f"OPENAI_API_KEY={team}   (APIKey {KEYS_NAMESPACE}/team: no limits, opens the console; "
              f"{KEYS_NAMESPACE}/trial: {TRIAL_RPM} requests/min, sent 1/s, so it gets 429s)")
        print(f"console: {gateway.console_url}   (a browser asks for a login: any user name, the key above "
              f"as the password; or curl -H 'Authorization: Bearer {team}' {gateway.console_url})")
        print("try it:\n  curl -s " + gateway.base_url + "/chat/completions -H 'Authorization: Bearer " + team
              + "' -H 'Content-Type: application/json' -d '{\"model\": \"" + trial_model
              + "\", \"messages\": [{\"role\": \"user\", \"content\": \"Hello\"}], \"max_tokens\": 16}'")
        print(f"KUBECONFIG={cluster.kubeconfig}   (use it from another terminal: kubectl get infd -A)")
        print(f"logs: {logs}\n", flush=True)
        while not stop:
            elapsed = time.monotonic() - started
            print(f"--- {time.strftime('%H:%M:%S')}  kubectl get infd -A", flush=True)
            print(cluster.kubectl("get", "infd", "-A", check=False).stdout, flush=True)
            pods = cluster.kubectl("get", "pods", "-A", "-l", "shardwise.io/inference-deployment",
                                   "-o", "custom-columns=NAMESPACE:.metadata.namespace,POD:.metadata.name,"
                                   "NODE:.spec.nodeName,IP:.status.podIP,PHASE:.status.phase", check=False).stdout
            print(pods, flush=True)
            if args.duration and elapsed > args.duration:
                break
            for _ in range(int(args.refresh_seconds * 10)):
                if stop:
                    break
                time.sleep(0.1)
    finally:
        print("stopping every process the demo started...", flush=True)
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
