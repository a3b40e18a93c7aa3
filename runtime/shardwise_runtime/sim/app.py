"""The HTTP face of one simulated engine: vLLM 0.32's OpenAI-compatible routes on aiohttp.

Handlers only translate between HTTP and the pure modules: bodies come from `protocol`, errors
from `errors` and `lora` (adapter loads), timing and accounting from `engine`. aiohttp rather than
FastAPI keeps a fleet of hundreds of engines in one process cheap; the responses still carry
uvicorn's `server` header and vLLM's content types so that nothing downstream can tell the
difference by looking.
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web
from prometheus_client import exposition

from shardwise_runtime.sim import errors, handoff, lora, protocol
from shardwise_runtime.sim.engine import Engine, Plan, plan_generation

ENGINE_KEY = web.AppKey("engine", Engine)
_JSON = "application/json"
TRTLLM_VERSION = "1.0.0"  # the release docs/engines.md pins


def _json(payload: Any, status: int = 200) -> web.Response:
    # Compact separators, as FastAPI renders vLLM's bodies.
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    return web.Response(status=status, body=body, headers={"content-type": _JSON})


def _error(body: errors.ErrorBody) -> web.Response:
    return _json(body, status=body["error"]["code"])


async def _set_server_header(_: web.Request, response: web.StreamResponse) -> None:
    response.headers["server"] = "uvicorn"


async def health(_: web.Request) -> web.Response:
    """GET /health: 200 with an empty body (health.headers)."""
    return web.Response(status=200, headers={"vary": "Origin"})


async def models(request: web.Request) -> web.Response:
    """GET /v1/models (models.json; with adapters, lora/models-with-adapters.json)."""
    engine = request.app[ENGINE_KEY]
    config = engine.config
    permission_id = engine.new_id("modelperm")
    adapters = [
        protocol.AdapterCard(a.name, a.root, a.parent, engine.new_id("modelperm"))
        for a in engine.adapters or ()
    ]
    return _json(
        protocol.models_response(
            config.served_model_names,
            config.model,
            config.max_model_len,
            engine.started,
            permission_id,
            adapters,
        )
    )


async def _read_json(request: web.Request) -> tuple[object, errors.ErrorBody | None]:
    try:
        return json.loads(await request.read()), None
    except (ValueError, UnicodeDecodeError) as error:
        return None, errors.invalid_json(str(error))


def _text(text: str) -> web.Response:
    # vLLM answers a successful (un)load with a bare starlette Response: plain text, no JSON.
    return web.Response(status=200, text=text)


async def load_lora_adapter(request: web.Request) -> web.Response:
    """POST /v1/load_lora_adapter (lora/load-*.txt)."""
    body, invalid = await _read_json(request)
    parsed = invalid or lora.read_load(body)
    if not isinstance(parsed, lora.LoadRequest):
        return _error(parsed)
    refused = await request.app[ENGINE_KEY].load_adapter(parsed)
    return _error(refused) if refused is not None else _text(lora.added_text(parsed.name))


async def unload_lora_adapter(request: web.Request) -> web.Response:
    """POST /v1/unload_lora_adapter (lora/unload-*.txt)."""
    body, invalid = await _read_json(request)
    name = invalid or lora.read_unload(body)
    if not isinstance(name, str):
        return _error(name)
    refused = request.app[ENGINE_KEY].unload_adapter(name)
    return _error(refused) if refused is not None else _text(lora.removed_text(name))


async def metrics(request: web.Request) -> web.Response:
    """GET /metrics in the Prometheus text format vLLM serves."""
    body = request.app[ENGINE_KEY].exposition()
    return web.Response(body=body, headers={"content-type": exposition.CONTENT_TYPE_PLAIN_0_0_4})


async def metrics_filtered(request: web.Request) -> web.Response:
    """GET /metrics/ (trailing slash): vLLM 0.32 mounts prometheus_client's ASGI app there beside
    the instrumentator's /metrics, and it honours `name[]` (only those families; an unknown name
    gives an empty 200), while /metrics ignores it (tests/fixtures/vllm-0.32-cpu/metrics-filtered.txt)."""
    names = request.query.getall("name[]", None)
    body = request.app[ENGINE_KEY].exposition(list(names) if names else None)
    return web.Response(body=body, headers={"content-type": exposition.CONTENT_TYPE_PLAIN_0_0_4})


async def _complete(request: web.Request, kind: protocol.Kind) -> web.StreamResponse:
    engine = request.app[ENGINE_KEY]
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError) as error:
        return _error(errors.invalid_json(str(error)))
    problems = errors.validate_chat(body) if kind == "chat" else errors.validate_completion(body)
    if problems:
        return _error(errors.validation_failed(problems))
    assert isinstance(body, dict)
    parsed = protocol.read_request(kind, body)
    plan = plan_generation(parsed, engine.config, engine.rng, engine.adapters or ())
    if not isinstance(plan, Plan):
        return _error(plan)
    ident = protocol.Identity(
        id=engine.new_id("chatcmpl" if kind == "chat" else "cmpl"),
        created=int(time.time()),
        model=plan.model,
        system_fingerprint=engine.system_fingerprint,
    )
    if parsed.stream:
        return await _stream(request, engine, kind, plan, ident, parsed.include_usage)
    async with engine.generate(plan) as generation:
        async for _ in generation:
            pass
    build = protocol.chat_response if kind == "chat" else protocol.completion_response
    answer = build(
        ident,
        protocol.generated_text(generation.emitted, plan.shift),
        plan.finish_reason,
        plan.prompt_tokens,
        generation.emitted,
    )
    if engine.config.role == handoff.PREFILL:  # where the decode engine finds this prompt's KV
        answer["kv_transfer_params"] = handoff.transfer_params(engine.config.host, engine.config.port, ident.id)
    return _json(answer)


async def _stream(
    request: web.Request,
    engine: Engine,
    kind: protocol.Kind,
    plan: Plan,
    ident: protocol.Identity,
    include_usage: bool,
) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream; charset=utf-8"})
    await response.prepare(request)
    try:
        async with engine.generate(plan) as generation:
            async for index in generation:
                if index == 0 and kind == "chat":
                    await response.write(protocol.sse_event(protocol.role_chunk(ident)))
                last = index == plan.tokens - 1
                chunk = protocol.token_chunk(
                    ident,
                    kind,
                    protocol.token_text(index, plan.shift),
                    plan.finish_reason if last else None,
                )
                await response.write(protocol.sse_event(chunk))
        if include_usage:
            usage = protocol.usage_chunk(ident, kind, plan.prompt_tokens, generation.emitted)
            await response.write(protocol.sse_event(usage))
        await response.write(protocol.SSE_DONE)
        await response.write_eof()
    except ConnectionResetError:
        pass  # the client left; the engine has already counted the abort
    return response


async def not_found(_: web.Request) -> web.Response:
    """Any other path: FastAPI's 404 body rather than aiohttp's plain-text one."""
    return _json({"detail": "Not Found"}, status=404)


async def chat_completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/chat/completions, streaming or not."""
    return await _complete(request, "chat")


async def completions(request: web.Request) -> web.StreamResponse:
    """POST /v1/completions, streaming or not."""
    return await _complete(request, "completion")


async def sglang_model_info(request: web.Request) -> web.Response:
    """GET /get_model_info of SGLang's http_server.py: where the weights and tokenizer came from."""
    config = request.app[ENGINE_KEY].config
    return _json({"model_path": config.model, "tokenizer_path": config.model, "is_generation": True,
                  "preferred_sampling_params": None, "weight_version": "default",
                  "has_image_understanding": False, "has_audio_understanding": False})


async def trtllm_models(request: web.Request) -> web.Response:
    """GET /v1/models of trtllm-serve: one card, the model it was started with."""
    engine = request.app[ENGINE_KEY]
    return _json({"object": "list", "data": [{"id": engine.config.model, "object": "model",
                                              "created": engine.started, "owned_by": "tensorrt_llm"}]})


async def trtllm_version(_: web.Request) -> web.Response:
    """GET /version of trtllm-serve."""
    return _json({"version": TRTLLM_VERSION})


async def trtllm_iteration_stats(request: web.Request) -> web.Response:
    """GET /metrics of trtllm-serve: JSON iteration stats, not Prometheus text."""
    engine = request.app[ENGINE_KEY]
    engine.exposition()  # brings the load gauges to this moment
    return _json(engine.metrics.iteration_stats())


def _routes(app: web.Application, engine: Engine) -> None:
    """The engine-specific read-only routes, after the argv that started it (EngineConfig.engine)."""
    app.router.add_get("/health", health)
    if engine.config.engine == "sglang":
        # sglang.launch_server: /health, /get_model_info, and /metrics only with --enable-metrics
        # (the operator always renders it).
        app.router.add_get("/get_model_info", sglang_model_info)
        app.router.add_get("/v1/models", models)
        app.router.add_get("/metrics", metrics)
    elif engine.config.engine == "trtllm":
        # trtllm-serve: JSON stats at /metrics, Prometheus text at /prometheus/metrics (mounted
        # with return_perf_metrics, which the operator's options file sets).
        app.router.add_get("/version", trtllm_version)
        app.router.add_get("/v1/models", trtllm_models)
        app.router.add_get("/metrics", trtllm_iteration_stats)
        app.router.add_get("/prometheus/metrics", metrics)
    else:
        app.router.add_get("/v1/models", models)
        app.router.add_get("/metrics", metrics)
        app.router.add_get("/metrics/", metrics_filtered)


def build_app(engine: Engine) -> web.Application:
    """The aiohttp application serving one engine."""
    app = web.Application()
    app[ENGINE_KEY] = engine
    app.on_response_prepare.append(_set_server_header)
    _routes(app, engine)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/completions", completions)
    if engine.config.runtime_lora_updating:
        # vLLM registers these only with VLLM_ALLOW_RUNTIME_LORA_UPDATING; else they are 404s.
        app.router.add_post("/v1/load_lora_adapter", load_lora_adapter)
        app.router.add_post("/v1/unload_lora_adapter", unload_lora_adapter)
    app.router.add_route("*", "/{path:.*}", not_found)
    return app


async def start_site(
    engine: Engine, *, shutdown_timeout_s: float = 60.0
) -> tuple[web.AppRunner, int]:
    """Serve `engine` on its configured host and port in the running loop.

    Returns the runner (clean it up to stop serving) and the bound port, which differs from the
    configured one only when that was 0. Raises OSError when the address is taken.
    """
    runner = web.AppRunner(build_app(engine), access_log=None, shutdown_timeout=shutdown_timeout_s)
    await runner.setup()
    site = web.TCPSite(runner, engine.config.host, engine.config.port)
    try:
        await site.start()
    except OSError:
        await runner.cleanup()
        raise
    _, port = runner.addresses[0][:2]
    return runner, int(port)
