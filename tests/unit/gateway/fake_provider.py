"""A stand-in for a hosted provider: the simulated engine behind TLS with a CA made by the test,
checking the provider key as a provider would, with faults chosen by the prompt (`fault:429` with
Retry-After 7, `fault:500`, `fault:reset` mid-stream) and `usage:cached`, an answer whose prompt
was mostly served from the provider's cache. Used by the real-Envoy unit test and the e2e."""

from __future__ import annotations

import asyncio
import json
import pathlib
import shutil
import ssl
import subprocess
import threading
from typing import Any

import pytest
from aiohttp import web

from shardwise_runtime.sim.app import build_app
from shardwise_runtime.sim.config import EngineConfig
from shardwise_runtime.sim.engine import Engine

PROVIDER_KEY = "sk-provider-" + "7f3a9c1e" * 4  # what the tests search for everywhere
CACHED_USAGE = (1000, 10, 800)  # prompt, completion, cached prompt tokens of a `usage:cached` answer


def _openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_ca(folder: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
    """A test CA and a server certificate for `localhost` signed by it: (ca.pem, cert.pem, key.pem)."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl CLI")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=shardwise test CA",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=folder)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout", "key.pem",
             "-out", "server.csr", cwd=folder)
    (folder / "san.ext").write_text("subjectAltName=DNS:localhost\n")
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-days", "2", "-extfile", "san.ext", "-out", "cert.pem", cwd=folder)
    return folder / "ca.pem", folder / "cert.pem", folder / "key.pem"


class FakeProvider:
    """The simulated engine behind TLS, checking the key like a provider; faults chosen by the prompt."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []  # authorization, model and path of every request
        self.headers: list[dict[str, str]] = []  # every header of every request

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        body = await request.json() if request.can_read_body else {}
        self.seen.append({"authorization": request.headers.get("authorization"), "path": request.path,
                          "model": body.get("model"), "host": request.headers.get("host")})
        self.headers.append(dict(request.headers))
        if request.headers.get("authorization") != f"Bearer {PROVIDER_KEY}":
            return web.json_response({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error",
                                                 "param": None, "code": "invalid_api_key"}}, status=401)
        prompt = json.dumps(body.get("messages"))
        if "fault:429" in prompt:
            return web.json_response({"error": {"message": "Rate limit reached for requests", "type": "requests",
                                                 "param": None, "code": "rate_limit_exceeded"}},
                                     status=429, headers={"retry-after": "7"})
        if "fault:500" in prompt:
            return web.json_response({"error": {"message": "The server had an error while processing your request.",
                                                 "type": "server_error", "param": None, "code": None}}, status=500)
        if "usage:cached" in prompt:  # a provider's prompt cache: most of the prompt served from it
            return web.json_response({
                "id": "chatcmpl-cached", "object": "chat.completion", "created": 0, "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "cached"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": CACHED_USAGE[0], "completion_tokens": CACHED_USAGE[1],
                          "total_tokens": CACHED_USAGE[0] + CACHED_USAGE[1],
                          "prompt_tokens_details": {"cached_tokens": CACHED_USAGE[2]}}})
        if "fault:reset" in prompt:
            response = web.StreamResponse(headers={"content-type": "text/event-stream"})
            await response.prepare(request)
            await response.write(b'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,'
                                 b'"delta":{"content":"par"}}]}\n\n')
            request.transport.abort()  # the connection reset mid-stream
            return response
        return await handler(request)


async def start(fake: FakeProvider, cert: pathlib.Path, key: pathlib.Path, model: str) -> tuple[web.AppRunner, int]:
    """The simulated engine serving `model` over TLS on 127.0.0.1 (a free port), behind `fake`."""
    app = build_app(Engine(EngineConfig(host="127.0.0.1", model=model, served_model_names=(model,), port=0,
                                        ttft_ms=5, itl_ms=1)))
    app.middlewares.insert(0, fake.middleware)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0, ssl_context=tls).start()
    return runner, int(runner.addresses[0][1])


class InThread:
    """`start` on an event loop of its own thread (for tests whose gateway runs in other processes)."""

    def __init__(self, fake: FakeProvider, cert: pathlib.Path, key: pathlib.Path, model: str) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner, self.port = asyncio.run_coroutine_threadsafe(start(fake, cert, key, model), self.loop).result(30)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
