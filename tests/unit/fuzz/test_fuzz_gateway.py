"""Fuzz: the gateway's pure handling of what clients, engines and the API server hand it (issue 44).

Targets: request bodies (bytes: broken, deep, huge numbers, lone surrogates, wrong shapes in valid
chat requests) into requests.parse_body, picker.prefix_of, requests.with_stream_usage and
picker.pick; Authorization headers into keys.bearer and the gatekeeper's authentication; engine
responses and SSE chunks, cut anywhere, into usage; route tables from odd but valid
InferenceDeployments and pods; quota arithmetic over a monotonic clock.

Invariants: a refusal is always one of the documented errors (status, JSON content type, OpenAI's
error object with the type its status documents, Retry-After an integer >= 1 where given); a
picked endpoint is one that was offered; token counts are integers >= 0 (or unknown); a route's
endpoints are its own ready pods; the buckets never admit more than a minute's worth plus what
refilled.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

import fuzz_inputs
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from shardwise.gateway.decide import keys, openai_errors, picker, quota, requests, routes, usage
from shardwise.gateway.decide.openai_errors import Refusal
from shardwise.gateway.service import gatekeeper
from shardwise.observe import parse

# Status -> the error types documented for it (openai_errors.py).
DOCUMENTED = {400: {"invalid_request_error"}, 401: {"invalid_request_error"}, 404: {"invalid_request_error"},
              413: {"invalid_request_error"}, 429: {"requests", "tokens", "concurrency"},
              500: {"server_error"}, 503: {"server_error"}}


def assert_documented(refusal: Refusal, *statuses: int) -> dict[str, Any]:
    assert isinstance(refusal, Refusal)
    assert refusal.status in statuses, refusal
    headers = dict(refusal.headers)
    assert headers["content-type"] == "application/json"
    document = json.loads(refusal.body)
    assert list(document) == ["error"]
    error = document["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] in DOCUMENTED[refusal.status]
    assert error["param"] in (None, "model") and (error["code"] is None or isinstance(error["code"], str))
    if "retry-after" in headers:
        assert headers["retry-after"].isdigit() and int(headers["retry-after"]) >= 1
    return error


# -- request bodies ----------------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70),
                     st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=40),
                     st.sampled_from(["\ud800", "\udfff x", "", " ", "\x00", "user", "assistant"]))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=20)
# The shapes seen crashing the picker (issue 44), beside whatever JSON holds.
_NOT_TEXT = st.sampled_from([1.0, 0, True, {"text": "x"}, [{"type": "text", "text": 0}], [1, None], "\ud800"])
_content = st.one_of(st.text(max_size=300), _NOT_TEXT, _json,
                     st.lists(st.one_of(st.fixed_dictionaries({"type": st.just("text"), "text": _json}),
                                        st.fixed_dictionaries({"type": st.just("text"), "text": st.text()}),
                                        _json), max_size=4))
_message = st.one_of(st.fixed_dictionaries({"role": st.one_of(st.sampled_from(["system", "user"]), _json),
                                            "content": _content}), _json)


@st.composite
def chat_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body: dict[str, Any] = {"model": draw(st.one_of(st.sampled_from(fuzz_inputs.MODELS), _json))}
    if draw(st.booleans()):
        body["messages"] = draw(st.one_of(st.lists(_message, max_size=5), _json))
    else:
        body["prompt"] = draw(st.one_of(st.text(max_size=300), st.lists(st.one_of(st.text(), _json), max_size=3),
                                        _json))
    for field in draw(st.lists(st.sampled_from(["stream", "stream_options", "max_tokens", "extra"]), unique=True)):
        body[field] = draw(st.one_of(_json, st.booleans()))
    return body


def _nested(depth: int, kind: str) -> str:
    return {"[": "[" * depth + "]" * depth, "{": '{"a":' * depth + "1" + "}" * depth}[kind]


@st.composite
def raw_bodies(draw: st.DrawFn) -> bytes:
    shape = draw(st.sampled_from(["chat", "chat", "chat", "not-text", "deep", "deep-field", "bytes", "cut",
                                  "number"]))
    if shape == "chat":
        return json.dumps(draw(chat_bodies())).encode("utf-8", "surrogatepass")
    if shape == "not-text":  # a valid request but for one message's content
        messages = [{"role": "system", "content": draw(st.text(max_size=20))},
                    {"role": "user", "content": draw(_NOT_TEXT)}]
        return json.dumps({"model": "m", "messages": messages[draw(st.integers(0, 1)):]}).encode()
    depth = draw(st.one_of(st.integers(1, 300), st.integers(900, 6000)))
    if shape == "deep":
        return _nested(depth, draw(st.sampled_from("[{"))).encode()
    if shape == "deep-field":  # a valid chat request with one deep extra field
        return (b'{"model":"m","messages":[{"role":"user","content":"hi"}],"x":'
                + _nested(depth, draw(st.sampled_from("[{"))).encode() + b"}")
    if shape == "bytes":
        return draw(st.binary(max_size=200))
    if shape == "number":  # more digits than Python converts (ValueError since 3.11)
        return b'{"model":"m","max_tokens":' + b"9" * draw(st.integers(1, 6000)) + b"}"
    whole = json.dumps(draw(chat_bodies())).encode("utf-8", "surrogatepass")
    return whole[:draw(st.integers(0, len(whole)))]


# What a client or an engine sends runs half as many inputs again as the profile's count.
_CLIENT_REACHABLE = settings(max_examples=settings.default.max_examples * 3 // 2)

_ENDPOINTS = [f"10.0.0.{i}:8000" for i in range(1, 9)]
_GAUGE_TEXT = st.sampled_from(["0", "1", "3.5", "NaN", "+Inf", "-Inf", "-1", "1e308", "0.97", "2", "1e-320"])


@st.composite
def engine_stats(draw: st.DrawFn) -> picker.EngineStats:
    """What a (possibly broken) exporter's scrape gives the picker, through the gateway's parser."""
    text = (f"vllm:num_requests_waiting{{engine=\"0\"}} {draw(_GAUGE_TEXT)}\n"
            f"vllm:kv_cache_usage_perc{{engine=\"0\"}} {draw(_GAUGE_TEXT)}\n")
    gauges = parse.load_gauges(text)
    return picker.EngineStats(waiting=gauges.get(parse.WAITING, 0.0),
                              kv_cache_usage=gauges.get(parse.KV_CACHE_USAGE, 0.0))


def _found(raw: bytes):  # what crashed the gateway before issue 44, in every profile
    return example(raw=raw, offered=_ENDPOINTS[:3], outstanding={}, stats={}, seq=0, path="/v1/chat/completions")


@_CLIENT_REACHABLE
@_found(b"[" * 5000 + b"]" * 5000)
@_found(b'{"model":"m","messages":[{"role":"user","content":"hi"}],"x":' + b"[" * 5000 + b"]" * 5000 + b"}")
@_found(b'{"model":"m","messages":[{"role":"user","content":1.0}]}')
@_found(b'{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":0}]}]}')
@_found(b'{"model":"m","messages":[{"role":"user","content":"\\ud800"}]}')
@given(raw=raw_bodies(), offered=st.lists(st.sampled_from(_ENDPOINTS), min_size=1, max_size=5, unique=True),
       outstanding=st.dictionaries(st.sampled_from(_ENDPOINTS), st.integers(0, 10_000)),
       stats=st.dictionaries(st.sampled_from(_ENDPOINTS), engine_stats()), seq=st.integers(0, 2**40),
       path=st.sampled_from(sorted(requests.STREAMING_PATHS) + ["/v1/embeddings"]))
def test_a_request_body_is_read_or_refused_with_the_documented_400(raw, offered, outstanding, stats, seq,
                                                                     path) -> None:
    fuzz_inputs.ran("gateway request bodies")
    parsed = requests.parse_body(raw)
    if isinstance(parsed, Refusal):
        error = assert_documented(parsed, 400)
        assert error["type"] == "invalid_request_error"
        return
    body, model = parsed
    assert isinstance(body, dict) and isinstance(model, str) and model and body["model"] == model
    prefix = picker.prefix_of(body)
    assert prefix is None or (isinstance(prefix, str) and 0 < len(prefix) <= picker.PREFIX_CHARS)
    assert picker.pick(offered, outstanding=outstanding, stats=stats, prefix=prefix, seq=seq) in offered
    mutated = requests.with_stream_usage(path, body)
    if mutated is not None:
        again = json.loads(mutated)
        assert again["stream_options"]["include_usage"] is True and again["model"] == model
        assert requests.parse_body(mutated)[1] == model  # what the engine gets reads the same


# -- Authorization headers ---------------------------------------------------------------------

_TOKEN = "sk-fuzz-1"
_KEYS = keys.build_table([{"metadata": {"name": "k", "namespace": "n"}, "spec": {"secretName": "s"}}],
                         [keys.slim_secret({"metadata": {"name": "s", "namespace": "n"},
                                            "data": {"key": "c2stZnV6ei0x"}})])
_authorization = st.one_of(
    st.none(), st.text(max_size=60),
    st.builds(lambda scheme, gap, token, tail: f"{scheme}{gap}{token}{tail}",
              st.sampled_from(["Bearer", "bearer", "BEARER", "Basic", "Bearer:", "", "Token"]),
              st.sampled_from(["", " ", "  ", "\t", " \t "]),
              st.one_of(st.just(_TOKEN), st.text(max_size=40)),
              st.sampled_from(["", " ", "\t", "\n", " x"])))


@given(authorization=_authorization, anonymous=st.booleans())
def test_an_authorization_header_is_a_key_or_the_documented_401(authorization, anonymous) -> None:
    fuzz_inputs.ran("gateway authorization")
    token = keys.bearer(authorization)
    if token is not None:
        assert token and token == token.strip() and token in authorization
        assert authorization.strip()[:6].lower() == "bearer"
    gate = gatekeeper.Gatekeeper(gatekeeper.AuthSettings(anonymous=anonymous))
    gate.set_table(_KEYS)
    found = gate.authenticate(authorization)
    if isinstance(found, Refusal):
        assert assert_documented(found, 401)["code"] == "invalid_api_key"
    elif found.id == keys.ANONYMOUS:
        assert anonymous and not authorization
    else:
        assert found.id == "n/k" and token == _TOKEN


# -- engine responses and SSE chunks -----------------------------------------------------------

_count = st.one_of(st.integers(0, 2**40), _json)


def _cut(data: bytes, draw: st.DrawFn) -> list[bytes]:
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    return [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)])]


@st.composite
def responses(draw: st.DrawFn) -> tuple[bool, bytes, dict[str, Any] | None]:
    """(streaming, the bytes a possibly broken engine sends, the usage it meant)."""
    usage_object = draw(st.one_of(st.none(), st.fixed_dictionaries({"prompt_tokens": _count,
                                                                      "completion_tokens": _count}), _json))
    if not draw(st.booleans()):
        body = {"object": "chat.completion", "choices": draw(_json)}
        if usage_object is not None:
            body["usage"] = usage_object
        data = json.dumps(body).encode("utf-8", "surrogatepass")
        return False, data + draw(st.sampled_from([b"", b"garbage", b"\xff"])), usage_object
    events = [b'data: {"choices":[{"delta":{"role":"assistant","content":""}}]}']
    events += [b'data: {"choices":[{"delta":{"content":"t"}}]}'] * draw(st.integers(0, 20))
    events += [b"data: " + draw(st.binary(max_size=30)) for _ in range(draw(st.integers(0, 2)))]
    if usage_object is not None:
        events.append(b'data: {"choices":[],"usage":' + json.dumps(usage_object).encode("utf-8", "surrogatepass")
                      + b"}")
    if draw(st.booleans()):
        events.append(b"data: [DONE]")
    data = b"".join(e + draw(st.sampled_from([b"\n\n", b"\r\n\r\n", b"\n"])) for e in events)
    return True, data[:draw(st.integers(0, len(data)))] if draw(st.booleans()) else data, usage_object


def _count_or_none(value: Any) -> bool:
    return value is None or (type(value) is int and value >= 0)


@_CLIENT_REACHABLE
@given(response=responses(), data=st.data())
def test_token_counts_from_any_engine_answer_are_integers_at_least_zero(response, data) -> None:
    fuzz_inputs.ran("gateway usage")
    streaming, raw, meant = response
    tally = usage.Tally(streaming=streaming)
    for chunk in _cut(raw, data.draw):
        tally.feed(chunk)
    prompt, completion = tally.tokens()
    assert _count_or_none(prompt) and _count_or_none(completion)
    assert tally.events >= 0
    if streaming:  # without a usage event the content events count
        assert completion is not None or b'"usage"' in raw
    text = raw[raw.find(b'"usage"'):] if b'"usage"' in raw else data.draw(st.one_of(st.none(), st.binary(max_size=40)))
    for value in usage.tokens_of(text, data.draw(st.one_of(st.none(), st.integers(0, 10**6)))):
        assert _count_or_none(value)
    whole = usage.parse_usage(text)
    assert whole is None or all(_count_or_none(v) for v in whole)
    if isinstance(meant, dict) and type(meant.get("prompt_tokens")) is int and meant["prompt_tokens"] >= 0 \
            and b"[DONE]" in raw:
        assert prompt == meant["prompt_tokens"]  # a whole stream with its usage: the engine's own figure


# -- route tables ------------------------------------------------------------------------------

_NAMES = ["a", "b", "chat", "sql-lora", "m-1"]


@st.composite
def deployments(draw: st.DrawFn, index: int) -> dict[str, Any]:
    name = draw(st.sampled_from(_NAMES))
    spec: dict[str, Any] = {"model": {"name": "Qwen/Qwen2.5-7B-Instruct"}}
    if draw(st.booleans()):
        spec["model"]["servedName"] = draw(st.sampled_from(_NAMES))
    if draw(st.booleans()):
        spec["replicas"] = draw(st.integers(0, 50))
    if draw(st.booleans()):
        spec["autoscaling"] = {"minReplicas": draw(st.integers(0, 3)), "maxReplicas": 5}
    if draw(st.booleans()):
        spec["adapters"] = [{"name": n} for n in draw(st.lists(st.sampled_from(_NAMES + ["sql"]), unique=True,
                                                               max_size=3))]
    status: dict[str, Any] = {}
    if draw(st.booleans()):
        status["desiredReplicas"] = draw(st.integers(0, 50))
    if draw(st.booleans()):
        status["cost"] = {"perMillionOutputTokensUSD": draw(st.one_of(st.floats(0, 1e6), st.integers(0, 10**6)))}
    if draw(st.booleans()) and "adapters" in spec:
        status["adapters"] = [{"name": a["name"], "reason": draw(st.sampled_from(
            ["Loaded", "Loading", "NotFound", "Failed"])), "message": draw(st.text(max_size=20))}
            for a in spec["adapters"]]
    meta: dict[str, Any] = {"name": name, "namespace": draw(st.sampled_from(["ns", "other"])),
                            "creationTimestamp": f"2026-0{draw(st.integers(1, 9))}-1{index % 10}T00:00:0{index % 10}Z"}
    if draw(st.integers(0, 9)) == 0:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": spec, "status": status}


@st.composite
def pods(draw: st.DrawFn, index: int) -> dict[str, Any]:
    labels = {routes.INSTANCE_LABEL: draw(st.sampled_from(_NAMES))}
    if draw(st.integers(0, 5)) == 0:
        labels[routes.WORKER_INDEX_LABEL] = draw(st.sampled_from(["0", "1", "2"]))
    meta: dict[str, Any] = {"name": f"p{index}", "namespace": draw(st.sampled_from(["ns", "other"])),
                            "labels": labels}
    if draw(st.booleans()):
        meta["annotations"] = {routes.LOADED_ADAPTERS_ANNOTATION: draw(st.sampled_from(
            ["", "sql", "sql, a", " , ,", "sql-lora,sql"]))}
    if draw(st.integers(0, 9)) == 0:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    status: dict[str, Any] = {"conditions": draw(st.lists(st.fixed_dictionaries({
        "type": st.sampled_from(["Ready", "ContainersReady", "PodScheduled"]),
        "status": st.sampled_from(["True", "False", "Unknown"])}), max_size=3))}
    if draw(st.integers(0, 5)):
        status["podIP"] = f"10.1.{index // 250}.{index % 250}"
    return {"metadata": meta, "status": status}


@given(data=st.data())
def test_a_route_table_from_any_valid_objects_offers_only_ready_pods_and_lists_every_model(data) -> None:
    infds = [data.draw(deployments(i)) for i in range(data.draw(st.integers(0, 6)))]
    keys_seen = [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in infds]
    assume(len(set(keys_seen)) == len(keys_seen))  # namespace/name is unique in a cluster
    fuzz_inputs.ran("gateway routes")
    pod_list = [data.draw(pods(i)) for i in range(data.draw(st.integers(0, 8)))]
    table = routes.build_table(infds, pod_list)
    shuffled = list(infds)
    random.Random(data.draw(st.integers(0, 2**32))).shuffle(shuffled)
    assert routes.build_table(shuffled, list(reversed(pod_list))) == table  # order never matters
    ready = routes.endpoints_by_deployment(pod_list)
    for model, route in table.routes.items():
        assert route.model == model and route.desired_replicas >= 0 and isinstance(route.desired_replicas, int)
        assert set(route.endpoints) <= set(ready.get((route.namespace, route.name), ()))
        assert route.usd_per_million_output_tokens is None or math.isfinite(route.usd_per_million_output_tokens)
        if route.base is not None:
            assert set(route.endpoints) <= set(table.routes[route.base].endpoints)
    listed = requests.models_list(table.models())
    assert listed.status == 200
    assert sorted(m["id"] for m in json.loads(listed.body)["data"]) == sorted(table.routes)
    live = [d for d in infds if not d["metadata"].get("deletionTimestamp")]
    assert len(table.routes) + len(table.conflicts) >= len(live)


# -- quota arithmetic --------------------------------------------------------------------------

_limit = st.one_of(st.none(), st.integers(1, 5), st.integers(1, 10**9))
_op = st.tuples(st.sampled_from(["admit", "admit", "release", "charge"]),
                st.floats(0, 120, allow_nan=False), st.integers(0, 10**7))


@given(rpm=_limit, tpm=_limit, concurrent=_limit, share=st.integers(-1, 8), ops=st.lists(_op, max_size=40))
def test_quota_buckets_admit_no_more_than_they_hold_and_refuse_with_the_documented_429(rpm, tpm, concurrent, share,
                                                                                       ops) -> None:
    fuzz_inputs.ran("gateway quota")
    key = keys.Key(id="n/k", models=frozenset(), requests_per_minute=rpm, tokens_per_minute=tpm,
                   max_concurrent=concurrent)
    limiter = quota.LocalLimiter(share)
    now, in_flight, admitted = 0.0, 0, 0
    for op, step, tokens in ops:
        now += step  # the clock is monotonic
        if op == "admit":
            verdict = limiter.admit(key, now)
            if verdict.allowed:
                in_flight, admitted = in_flight + 1, admitted + 1
            else:
                assert verdict.kind in (quota.REQUESTS, quota.TOKENS, quota.CONCURRENCY)
                assert type(verdict.retry_after_s) is int and verdict.retry_after_s >= 1
                limit = {quota.REQUESTS: rpm, quota.TOKENS: tpm, quota.CONCURRENCY: concurrent}[verdict.kind]
                refusal = openai_errors.over_quota(key.id, verdict.kind, limit, verdict.retry_after_s)
                assert assert_documented(refusal, 429)["code"] == "rate_limit_exceeded"
        elif op == "release" and in_flight:
            limiter.release(key)
            in_flight -= 1
        elif op == "charge":
            limiter.charge(key, tokens, now)
        if concurrent is not None:
            assert in_flight <= quota.share_of(concurrent, max(1, share))
    if rpm is not None:  # a bucket of a minute's worth, refilled at its capacity per minute
        capacity = quota.share_of(rpm, max(1, share))
        assert admitted <= capacity + now * capacity / quota.WINDOW_S + 1e-6
    fields = quota.Usage(requests=admitted, prompt=in_flight).as_fields()
    assert quota.Usage.from_fields({k.encode(): str(v).encode() for k, v in fields.items()}) == \
        quota.Usage(requests=admitted, prompt=in_flight)


@given(deficit=st.floats(1e-9, 1e12, allow_nan=False), capacity=st.integers(1, 10**9))
def test_retry_after_is_a_whole_second_at_least_one(deficit, capacity) -> None:
    fuzz_inputs.ran("gateway quota")
    seconds = quota.retry_after_s(deficit, capacity)
    assert type(seconds) is int and seconds >= 1
    assert seconds >= deficit * quota.WINDOW_S / capacity - 1e-6  # never sooner than the refill
