"""The live console's shell: `/console` on the gateway's HTTP port, and its one-a-minute sampler.

Reads only what the gateway already holds: its InferenceDeployment informers (whose slim copies
carry `console.figures`), its own per-key series, and the History kept here in memory. The page
itself is console.render's.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from aiohttp import web

from shardwise.gateway import metrics
from shardwise.gateway.console import page as console
from shardwise.gateway.decide import consoleaccess


class Source(Protocol):
    """What the console needs of the gateway process."""

    infds: list[Any]
    settings: Any
    gatekeeper: Any  # with keys: the key table
    keyring: Any  # with keys: the APIKey informers (which keys open the console)


def _models(gateway: Source) -> list[tuple[str, str, str, dict[str, Any]]]:
    out = []
    for informer in gateway.infds:
        for obj in informer.items():
            meta = obj.get("metadata") or {}
            served = ((obj.get("spec") or {}).get("model") or {}).get("servedName") or meta.get("name", "")
            out.append((meta.get("namespace", ""), meta.get("name", ""), served, obj.get("console") or {}))
    return sorted(out)


def _key_samples() -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, dict(s.labels), s.value) for family in metrics.REGISTRY.collect()
            for s in family.samples if "key" in s.labels]


def _served_samples() -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, dict(s.labels), s.value) for s in metrics.SERVED.collect()[0].samples]


class Console:
    def __init__(self, gateway: Source, clock: Callable[[], float] = time.time,
                 sample_every_s: float = console.EVERY_S, refresh_s: float = 10.0) -> None:
        self.gateway, self.clock = gateway, clock
        self.history = console.History()
        self.sample_every_s, self.refresh_s = sample_every_s, refresh_s

    def sample(self) -> list[tuple[str, str, str, dict[str, Any]]]:
        models = _models(self.gateway)
        now = self.clock()
        for namespace, name, _, fig in models:
            self.history.record(f"{namespace}/{name}", now, fig)
        self.history.forget_except(f"{ns}/{n}" for ns, n, _, _ in models)
        return models

    def view(self) -> console.View:
        models = self.sample()
        return console.View(
            models=[console.ModelView(ns, name, served, fig, self.history.series(f"{ns}/{name}"))
                    for ns, name, served, fig in models],
            keys=console.key_rows(_key_samples()),
            engines=console.engine_rows(_served_samples()),
            keys_enabled=getattr(self.gateway.settings, "auth", None) is not None,
            generated_at=datetime.datetime.fromtimestamp(self.clock(), datetime.timezone.utc)
            .strftime("%Y-%m-%d %H:%M:%S UTC"),
            refresh_s=self.refresh_s)

    async def handle(self, request: web.Request) -> web.Response:
        refused = self.refusal(request.headers.get("Authorization"))
        if refused is not None:
            return refused
        return web.Response(text=console.render(self.view()), content_type="text/html",
                            headers={"cache-control": "no-store"})

    def refusal(self, authorization: str | None) -> web.Response | None:
        """With keys on, every key's usage is shown only to a key with console access (consoleaccess.py)."""
        gatekeeper, keyring = getattr(self.gateway, "gatekeeper", None), getattr(self.gateway, "keyring", None)
        if gatekeeper is None:
            return None
        # Read at each request from the informers: a grant or a revocation holds at the next page load.
        granted = consoleaccess.granted(o for i in (keyring.apikeys if keyring is not None else ()) for o in i.items())
        status = consoleaccess.verdict(authorization, gatekeeper.table, granted)
        if status == 200:
            return None
        text = ("401: the console needs an API key whose APIKey has console: true (Authorization: Bearer KEY, "
                "or KEY as the password when the browser asks)\n" if status == 401 else
                "403: this API key does not open the console (its APIKey has no console: true)\n")
        headers = {"cache-control": "no-store"}
        if status == 401:
            headers["www-authenticate"] = consoleaccess.CHALLENGE
        return web.Response(status=status, text=text, headers=headers)

    async def _sampler(self, _: web.Application) -> AsyncIterator[None]:
        async def loop() -> None:
            while True:
                await asyncio.sleep(self.sample_every_s)
                self.sample()

        task = asyncio.create_task(loop())
        yield
        task.cancel()


def add_routes(app: web.Application, gateway: Source) -> Console:
    """Serve the console at /console on the gateway's HTTP app, sampling its history meanwhile."""
    page = Console(gateway)
    app.router.add_get("/console", page.handle)
    app.cleanup_ctx.append(page._sampler)
    return page
