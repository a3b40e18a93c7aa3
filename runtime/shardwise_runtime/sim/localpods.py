"""Run model downloader pods of the local cluster as real processes, as a kubelet would.

KWOK runs no containers; for serving pods the fleet answers with simulated engines, but the
downloader must really download, so this runner starts each downloader pod's container (the
pods labelled `shardwise.io/model-cache`, which KWOK is told never to complete) as a local
process with the exact command, arguments and environment the operator rendered. Only what
cannot hold on a loopback host changes, and it is logged:
  - a volume's mount path becomes the folder of the PersistentVolume bound to its claim
    (hostPath or local PVs, which the harness creates, since no provisioner runs here);
  - the progress endpoint binds to the pod's loopback IP (SHARDWISE_PROGRESS_HOST);
  - the termination message goes to a file of the runner (SHARDWISE_TERMINATION_LOG).
When the process exits, the runner writes what a kubelet would: the container's terminated state
(exit code, termination message) and the pod phase, so the Job controller counts the attempt.
Env from Secrets and the pod IP are resolved as the kubelet resolves them.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
from base64 import b64decode
from typing import Any

from kubernetes import client, config

log = logging.getLogger(__name__)
POD_LABEL = "shardwise.io/model-cache"


@dataclasses.dataclass
class LocalPod:
    key: str
    popen: subprocess.Popen[bytes]
    termination_log: pathlib.Path
    started_at: str


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class LocalPodRunner:
    """Polls the downloader pods of `namespace` ("all" for every namespace) and keeps one process
    per pod that should run."""

    def __init__(self, kubeconfig: str, namespace: str, work_dir: pathlib.Path, *, interval_s: float = 0.5) -> None:
        self.api = client.CoreV1Api(config.new_client_from_config(kubeconfig))  # type: ignore[no-untyped-call]
        self.namespace = namespace
        self.work_dir = pathlib.Path(work_dir)
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.interval_s = interval_s
        self.running: dict[str, LocalPod] = {}
        self.finished: set[str] = set()  # pod uids whose exit was recorded
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="local-pods", daemon=True)

    def start(self) -> "LocalPodRunner":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        with self._lock:
            for pod in self.running.values():
                _terminate(pod.popen)
            self.running.clear()

    def kill(self, key: str) -> bool:
        """SIGKILL the process of pod `namespace/name` (a test's way to interrupt a download)."""
        with self._lock:
            pod = self.running.get(key)
        if pod is None:
            return False
        pod.popen.kill()
        return True

    # -- loop -------------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._sync()
            except Exception as error:  # noqa: BLE001 - the runner must survive API hiccups
                log.warning("local pod runner: %s", error)
            self._stop.wait(self.interval_s)

    def _list(self) -> list[Any]:
        if self.namespace == "all":
            return list(self.api.list_pod_for_all_namespaces(label_selector=POD_LABEL).items)
        return list(self.api.list_namespaced_pod(self.namespace, label_selector=POD_LABEL).items)

    def _sync(self) -> None:
        pods = {f"{p.metadata.namespace}/{p.metadata.name}": p for p in self._list()}
        with self._lock:
            for key in [k for k in self.running if k not in pods or pods[k].metadata.deletion_timestamp]:
                _terminate(self.running.pop(key).popen)
                log.info("stopped local process of deleted pod %s", key)
            for key, local in list(self.running.items()):
                code = local.popen.poll()
                if code is not None:
                    self._record_exit(pods[key], local, code)
                    del self.running[key]
            for key, pod in pods.items():
                if key in self.running or pod.metadata.uid in self.finished or pod.metadata.deletion_timestamp:
                    continue
                if pod.status.phase == "Running" and pod.status.pod_ip:
                    self._start(key, pod)

    def _start(self, key: str, pod: Any) -> None:
        container = pod.spec.containers[0]
        mounts = self._mount_paths(pod)
        if mounts is None:
            return  # a claim is not bound yet: a later pass tries again
        argv = [*(container.command or []), *(container.args or [])]
        argv = [_remap(a, mounts) for a in argv]
        executable = pathlib.Path(sys.executable).parent / argv[0]
        argv[0] = str(executable) if executable.exists() else (shutil.which(argv[0]) or argv[0])
        termination = self.work_dir / f"{pod.metadata.namespace}.{pod.metadata.name}.termination"
        env = {**self._env(pod, container), "SHARDWISE_PROGRESS_HOST": pod.status.pod_ip,
               "SHARDWISE_TERMINATION_LOG": str(termination), "PATH": os.environ.get("PATH", "")}
        env["HOME"] = env["HF_HOME"] = str(self.work_dir / "home")
        log_path = self.work_dir / f"{pod.metadata.namespace}.{pod.metadata.name}.log"
        with log_path.open("ab") as out:
            popen = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        self.running[key] = LocalPod(key, popen, termination, _now())
        log.info("running pod %s as local process %d: volumes %s, progress on %s, log %s", key, popen.pid,
                 mounts, pod.status.pod_ip, log_path)

    def _mount_paths(self, pod: Any) -> dict[str, str] | None:
        """mountPath -> local folder of the PersistentVolume behind each claim; emptyDirs get a
        folder of the runner."""
        by_volume: dict[str, str] = {}
        for volume in pod.spec.volumes or []:
            if volume.persistent_volume_claim is not None:
                claim = self.api.read_namespaced_persistent_volume_claim(
                    volume.persistent_volume_claim.claim_name, pod.metadata.namespace)
                if not claim.spec.volume_name:
                    return None
                pv = self.api.read_persistent_volume(claim.spec.volume_name)
                source = pv.spec.host_path or pv.spec.local
                if source is None:
                    log.warning("pod %s: volume %s is neither hostPath nor local", pod.metadata.name, volume.name)
                    return None
                by_volume[volume.name] = source.path
            elif volume.empty_dir is not None:
                folder = self.work_dir / "emptydir" / pod.metadata.uid / volume.name
                folder.mkdir(parents=True, exist_ok=True)
                by_volume[volume.name] = str(folder)
        return {m.mount_path: by_volume[m.name] for m in pod.spec.containers[0].volume_mounts or []
                if m.name in by_volume}

    def _env(self, pod: Any, container: Any) -> dict[str, str]:
        env: dict[str, str] = {}
        for item in container.env or []:
            if item.value is not None:
                env[item.name] = item.value
            elif item.value_from is not None and item.value_from.secret_key_ref is not None:
                ref = item.value_from.secret_key_ref
                secret = self.api.read_namespaced_secret(ref.name, pod.metadata.namespace)
                env[item.name] = b64decode((secret.data or {})[ref.key]).decode()
            elif item.value_from is not None and item.value_from.field_ref is not None:
                if item.value_from.field_ref.field_path == "status.podIP":
                    env[item.name] = pod.status.pod_ip
        return env

    def _record_exit(self, pod: Any, local: LocalPod, code: int) -> None:
        message = local.termination_log.read_text()[:4096] if local.termination_log.is_file() else ""
        exit_code = code if code >= 0 else 128 - code  # killed by signal N: 128 + N, as a kubelet reports
        container = pod.spec.containers[0]
        terminated = {"exitCode": exit_code, "reason": "Completed" if code == 0 else "Error",
                      "startedAt": local.started_at, "finishedAt": _now()}
        if message:
            terminated["message"] = message
        phase = "Succeeded" if code == 0 else "Failed"
        body = {"status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "False", "reason": "PodCompleted",
                            "lastTransitionTime": _now()},
                           {"type": "ContainersReady", "status": "False", "reason": "PodCompleted",
                            "lastTransitionTime": _now()}],
            "containerStatuses": [{"name": container.name, "image": container.image, "imageID": "",
                                   "ready": False, "restartCount": 0, "started": False,
                                   "state": {"terminated": terminated}}],
        }}
        self.api.patch_namespaced_pod_status(pod.metadata.name, pod.metadata.namespace, body)
        self.finished.add(pod.metadata.uid)
        log.info("pod %s: local process exited %d -> %s", local.key, exit_code, phase)


def _remap(arg: str, mounts: dict[str, str]) -> str:
    for mount_path, local in sorted(mounts.items(), key=lambda m: -len(m[0])):
        if arg == mount_path or arg.startswith(mount_path.rstrip("/") + "/"):
            return local + arg[len(mount_path.rstrip("/")):]
    return arg


def _terminate(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is None:
        popen.terminate()
        try:
            popen.wait(10)
        except subprocess.TimeoutExpired:
            popen.kill()
