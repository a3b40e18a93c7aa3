"""Runs real vLLM processes for pods and plays the kubelet's part for them: probes and restarts.

KWOK runs no containers and marks a real-engine pod Running but not Ready (its stage for
`real.LOCAL_VLLM_CPU_IMAGE`, see shardwise/devcluster/kwok-pod-stages.yaml). For each such pod this runs the
container's process (`real.real_launch`) and then does what a kubelet does with the probes the
operator rendered: the startup probe gates the others and restarts the container when it runs out;
readiness sets the pod's Ready condition; liveness failures and process exits restart the
container (restartCount + 1, after a back-off). A container without probes is ready while its
process runs (multi-node workers). Every transition goes through `report`, which writes the pod
status in the fleet.

Each process runs in its own session, so stopping it ends vLLM's engine-core and worker
processes too.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pathlib
import signal
import time
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from shardwise_runtime.launcher import supervise
from shardwise_runtime.sim.real import Probe, RealLaunch

log = logging.getLogger(__name__)

STOP_GRACE_S = 15.0
RESTART_BACKOFF_S = 5.0
# Report = (pod key, ready, restart count, reason) -> None
Report = Callable[[str, bool, int, str], Awaitable[None]]


async def _probe_once(session: aiohttp.ClientSession, host: str, probe: Probe) -> bool:
    try:
        async with session.get(f"http://{host}:{probe.port}{probe.path}",
                               timeout=aiohttp.ClientTimeout(total=probe.timeout_s)) as response:
            return 200 <= response.status < 400
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
        return False


class Container:
    """One pod's container process, supervised until `stop`."""

    def __init__(self, key: str, launch: RealLaunch, log_dir: pathlib.Path, report: Report) -> None:
        self.key = key
        self.launch = launch
        self.log_path = log_dir / (key.replace("/", "_") + ".log")
        self.report = report
        self.restarts = 0
        self.ready = False
        self.process: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._supervise(), name=f"container {self.key}")

    async def stop(self) -> None:
        self._stopping = True
        await self._kill()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task

    async def _set_ready(self, ready: bool, reason: str, *, force: bool = False) -> None:
        if ready != self.ready or force:
            self.ready = ready
            log.info("%s: ready=%s (%s, restarts %d)", self.key, ready, reason, self.restarts)
            try:
                await self.report(self.key, ready, self.restarts, reason)
            except Exception as error:  # noqa: BLE001 - the next transition or resync retries
                log.warning("%s: cannot report readiness: %s", self.key, error)

    async def _spawn(self) -> asyncio.subprocess.Process:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        out = self.log_path.open("ab")
        try:
            out.write(f"\n--- start {time.strftime('%H:%M:%S')} restart {self.restarts}: "
                      f"{' '.join(self.launch.argv)}\n".encode())
            for change in self.launch.changes:
                out.write(f"--- changed from the rendered container: {change}\n".encode())
            out.flush()
            return await asyncio.create_subprocess_exec(
                *self.launch.argv, env=dict(self.launch.env), stdout=out, stderr=out,
                stdin=asyncio.subprocess.DEVNULL, start_new_session=True,
                preexec_fn=supervise.die_with_parent)
        finally:
            out.close()

    async def _kill(self) -> None:
        process = self.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), STOP_GRACE_S)
        except asyncio.TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)  # stragglers of the session

    async def _address_taken(self) -> bool:
        """Whether something else already listens on the pod's serving port.

        Parallel local clusters can hand out the same loopback pod IP; a probe answered by another
        cluster's engine would make this pod Ready while its own vLLM is still loading. So the
        container starts only once the address is free; after that its vLLM holds it.
        """
        probe = self.launch.readiness or self.launch.startup or self.launch.liveness
        if probe is None:
            return False
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(self.launch.host, probe.port), 2)
        except (OSError, asyncio.TimeoutError):
            return False
        writer.close()
        return True

    async def _supervise(self) -> None:
        async with aiohttp.ClientSession() as session:
            while not self._stopping:
                if await self._address_taken():
                    log.warning("%s: %s is already served by another process; waiting", self.key,
                                self.launch.host)
                    await asyncio.sleep(RESTART_BACKOFF_S)
                    continue
                self.process = await self._spawn()
                log.info("%s: started pid %d: %s", self.key, self.process.pid, " ".join(self.launch.argv))
                for change in self.launch.changes:
                    log.info("%s: changed from the rendered container: %s", self.key, change)
                reason = await self._run_probes(session, self.process)
                await self._kill()
                if self._stopping:
                    return
                self.restarts += 1
                await self._set_ready(False, reason, force=True)  # the new restart count
                log.warning("%s: restarting after %s (restart %d)", self.key, reason, self.restarts)
                await asyncio.sleep(RESTART_BACKOFF_S)

    async def _run_probes(self, session: aiohttp.ClientSession,
                          process: asyncio.subprocess.Process) -> str:
        """Probe until the container must restart; returns why."""
        launch = self.launch
        exited = asyncio.create_task(process.wait())
        try:
            if launch.startup is None and launch.readiness is None and launch.liveness is None:
                await self._set_ready(True, "Running")
                code = await exited
                return f"exit code {code}"
            if launch.startup is not None:
                reason = await self._until(session, launch.startup, exited, succeed=True)
                if reason:
                    return reason
            readiness_failures = liveness_failures = 0
            probes = [p for p in (launch.readiness, launch.liveness) if p is not None]
            period = min(p.period_s for p in probes) if probes else 5.0
            last_liveness = 0.0
            while True:
                if launch.readiness is not None:
                    ok = await _probe_once(session, launch.host, launch.readiness)
                    readiness_failures = 0 if ok else readiness_failures + 1
                    if ok:
                        await self._set_ready(True, "ProbeSucceeded")
                    elif readiness_failures >= launch.readiness.failure_threshold:
                        await self._set_ready(False, "ReadinessProbeFailed")
                else:
                    await self._set_ready(True, "Running")
                now = time.monotonic()
                if launch.liveness is not None and now - last_liveness >= launch.liveness.period_s:
                    last_liveness = now
                    ok = await _probe_once(session, launch.host, launch.liveness)
                    liveness_failures = 0 if ok else liveness_failures + 1
                    if liveness_failures >= launch.liveness.failure_threshold:
                        return "LivenessProbeFailed"
                done, _ = await asyncio.wait({exited}, timeout=period)
                if done:
                    await self._set_ready(False, "ContainerExited")
                    return f"exit code {exited.result()}"
        finally:
            exited.cancel()

    async def _until(self, session: aiohttp.ClientSession, probe: Probe, exited: asyncio.Task[int],
                     *, succeed: bool) -> str | None:
        """Startup probe: None once it succeeds; a reason when it runs out or the process exits."""
        await asyncio.sleep(probe.initial_delay_s)
        failures = 0
        while True:
            if exited.done():
                return f"exit code {exited.result()} before the startup probe succeeded"
            if await _probe_once(session, self.launch.host, probe) == succeed:
                return None
            failures += 1
            if failures >= probe.failure_threshold:
                return "StartupProbeFailed"
            await asyncio.wait({exited}, timeout=probe.period_s)


class RealEngines:
    """Real-engine containers keyed by pod, brought to a desired set like the simulated ones."""

    def __init__(self, log_dir: pathlib.Path, report: Report) -> None:
        self.log_dir = log_dir
        self.report = report
        self.containers: dict[str, Container] = {}

    async def apply(self, desired: Mapping[str, RealLaunch]) -> None:
        gone = [self.containers.pop(k) for k, c in list(self.containers.items()) if desired.get(k) != c.launch]
        await asyncio.gather(*(container.stop() for container in gone))
        for container in gone:
            log.info("stopped real engine for %s", container.key)
        for key, launch in desired.items():
            if key not in self.containers:
                container = Container(key, launch, self.log_dir, self.report)
                self.containers[key] = container
                container.start()

    async def close(self) -> None:
        await self.apply({})
