"""The prefill leg of a request to a disaggregated pair: one HTTP call to a prefill engine before
the decode engine is routed (decide/disaggregation.py has the rules and the protocol).

The decode leg is the request Envoy already carries, streamed unbuffered as any other: the picker's
answer mutates its body to add the prefill engine's kv_transfer_params. Any failure of the prefill
leg (refused, reset mid-request, an error status, no JSON, too slow) sends the request to its
decode engine unchanged: it prefills itself, as when no prefill engine is ready. The client sees
a slower first token, never an error; the log and shardwise_gateway_prefill_legs_total say so.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import aiohttp

from shardwise.gateway import metrics
from shardwise.gateway.decide import disaggregation, picker, routes
from shardwise.gateway.decide.disaggregation import Leg

log = logging.getLogger(__name__)

PREFILLED, FAILED = "prefilled", "failed"


class PrefillLegs:
    def __init__(self, *, min_prompt_tokens: int = disaggregation.DEFAULT_MIN_PROMPT_TOKENS,
                 timeout_s: float = 120.0) -> None:
        self.min_prompt_tokens = min_prompt_tokens
        self.timeout_s = timeout_s
        self.memory = disaggregation.PrefixMemory()
        self._session: aiohttp.ClientSession | None = None
        self._seq = 0

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:  # made on the loop that serves the requests
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def before_decode(self, dispatcher: Any, route: routes.Route, decode_endpoint: str, path: str,
                            body: dict[str, Any], request_id: str) -> Leg:
        """Prefill on a prefill engine when the rules say so; the outcome either way."""
        text = disaggregation.prompt_text(body)
        hashes, prompt_tokens = disaggregation.block_hashes(text), disaggregation.estimated_tokens(text)
        matched = self.memory.matched(decode_endpoint, hashes)
        cached = min(prompt_tokens, matched * disaggregation.BLOCK_CHARS // disaggregation.CHARS_PER_TOKEN)
        self.memory.record(decode_endpoint, hashes)  # it holds this prompt after this request, either way
        self._seq += 1
        if self._seq % 1000 == 0:  # forget the engines that are gone
            self.memory.retain({e for r in dispatcher.table.models() for e in r.endpoints})
        why = disaggregation.whole_on_decode(path, prompt_tokens, cached, route.prefill_endpoints,
                                             self.min_prompt_tokens)
        if why is not None:
            return self._counted(route, Leg(why))
        outstanding = dispatcher.outstanding
        loads = {e: picker.load_of(e, outstanding, dispatcher.stats) for e in route.prefill_endpoints}
        endpoint = disaggregation.pick_prefill(route.prefill_endpoints, decode_endpoint, dict(route.nodes), loads,
                                               self._seq)
        outstanding[endpoint] = outstanding.get(endpoint, 0) + 1
        try:
            params = await self._prefill(endpoint, path, body, request_id)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as exc:
            log.warning("request %s: prefill engine %s of %s failed (%s: %s); its decode engine %s prefills it",
                        request_id, endpoint, route.model, type(exc).__name__, exc, decode_endpoint)
            return self._counted(route, Leg(FAILED))
        finally:
            dispatcher.done(endpoint)
        return self._counted(route, Leg(PREFILLED, endpoint, params))

    async def _prefill(self, endpoint: str, path: str, body: dict[str, Any], request_id: str) -> dict[str, Any] | None:
        data = disaggregation.encode(disaggregation.prefill_body(body))
        async with self._client().post(f"http://{endpoint}{path}", data=data,
                                       headers={"content-type": "application/json", "x-request-id": request_id}) as r:
            text = await r.read()
            if r.status != 200:
                raise ValueError(f"answered {r.status}: {text[:200]!r}")
            return disaggregation.kv_params_of(json.loads(text))

    @staticmethod
    def _counted(route: routes.Route, leg: Leg) -> Leg:
        metrics.PREFILL_LEGS.labels(route.model, leg.outcome).inc()
        return leg
