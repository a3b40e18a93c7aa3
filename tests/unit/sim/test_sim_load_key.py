"""The load generator sends its API key as a bearer token (the demo's traffic through a keyed gateway)."""

from __future__ import annotations

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from shardwise_runtime.sim import load


@pytest.mark.anyio
async def test_the_key_goes_as_a_bearer_token_and_a_refusal_is_an_error() -> None:
    seen: list[str] = []

    async def refuse(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        return web.json_response({"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}},
                                 status=429)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", refuse)
    async with TestServer(app, host="127.0.0.1") as server:
        records = await load.run_load([f"http://127.0.0.1:{server.port}/v1"], "tiny", rps=20, duration_s=0.1,
                                      request_timeout_s=5, api_key="sk-demo-trial")
    assert seen == ["Bearer sk-demo-trial"] * 2
    assert len(records) == 2 and all(r.error and "429" in r.error for r in records)
