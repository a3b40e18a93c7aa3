"""The shared quota store: every replica's buckets, leases and usage in one Redis.

One round trip on the hot path: `admit` is one Lua script (atomic in Redis) that expires stale
leases, checks concurrency, the requests bucket and the tokens bucket, and takes a request and a
lease only when all three allow it; on a refusal it counts the 429 in the key's usage. Time is
Redis's own (`TIME`), so replicas with skewed clocks still share one bucket. After the response
(off the client's path): `charge` takes the usage's tokens and adds the usage to the key's
counters; `release` removes the lease. Leases expire (`lease_ttl_s`, renewed while the request
runs), so a replica that dies cannot leak concurrency slots. Bucket keys expire once they would
be full again: an absent bucket is a full one.

The status writer `harvest`s each key's usage counters (read and delete, atomically): usage is
counted once, whichever replica served it. Redis keys: `<prefix>{<key id>}:r|t|c|u` (a hash tag
per key, so a Redis Cluster keeps one key's state on one shard).
"""

from __future__ import annotations

import math
from typing import Any

import redis.asyncio as aioredis

from shardwise.gateway.decide import keys, quota

_ADMIT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local rpm, tpm, conc, ttl = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[5])
local function level(key, cap)
  local v = redis.call('HMGET', key, 'l', 't')
  if not v[1] then return cap end
  local l = tonumber(v[1]) + (now - tonumber(v[2])) * cap / 60000
  if l > cap then return cap end
  return l
end
local function refuse(kind, ms)
  redis.call('HINCRBY', KEYS[4], 'limited', 1)
  return {0, kind, ms}
end
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
  if redis.call('ZCARD', KEYS[3]) >= conc then return refuse('concurrency', 1000) end
end
local r = 0
if rpm > 0 then
  r = level(KEYS[1], rpm)
  if r < 1 then return refuse('requests', math.ceil((1 - r) * 60000 / rpm)) end
end
if tpm > 0 then
  local l = level(KEYS[2], tpm)
  if l <= 0 then return refuse('tokens', math.ceil((1 - l) * 60000 / tpm)) end
end
if rpm > 0 then
  redis.call('HSET', KEYS[1], 'l', tostring(r - 1), 't', now)
  redis.call('PEXPIRE', KEYS[1], math.ceil((rpm - r + 1) * 60000 / rpm) + 1000)
end
if conc > 0 then
  redis.call('ZADD', KEYS[3], now + ttl, ARGV[4])
  redis.call('PEXPIRE', KEYS[3], ttl * 2)
end
return {1, '', 0}
"""

_CHARGE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local tpm, tokens = tonumber(ARGV[1]), tonumber(ARGV[2])
if tpm > 0 and tokens > 0 then
  local v = redis.call('HMGET', KEYS[1], 'l', 't')
  local l = tpm
  if v[1] then
    l = tonumber(v[1]) + (now - tonumber(v[2])) * tpm / 60000
    if l > tpm then l = tpm end
  end
  l = l - tokens
  redis.call('HSET', KEYS[1], 'l', tostring(l), 't', now)
  redis.call('PEXPIRE', KEYS[1], math.ceil((tpm - l) * 60000 / tpm) + 1000)
end
for i = 3, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[2], ARGV[i], ARGV[i + 1])
end
return 1
"""

_HARVEST = """
local v = redis.call('HGETALL', KEYS[1])
redis.call('DEL', KEYS[1])
return v
"""


class RedisQuota:
    def __init__(self, url: str, *, prefix: str = "shardwise:", timeout_s: float = 0.25,
                 lease_ttl_s: float = 30.0) -> None:
        self.client = aioredis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s,
                                              retry_on_timeout=False)
        self.prefix = prefix
        self.lease_ttl_ms = int(lease_ttl_s * 1000)
        self._admit = self.client.register_script(_ADMIT)
        self._charge = self.client.register_script(_CHARGE)
        self._harvest = self.client.register_script(_HARVEST)

    def _names(self, key_id: str) -> list[str]:
        base = f"{self.prefix}{{{key_id}}}:"
        return [base + "r", base + "t", base + "c", base + "u"]

    async def reset(self) -> None:
        """Drop pooled connections (after an outage they are dead; each would fail once)."""
        await self.client.connection_pool.disconnect()

    async def ping(self) -> bool:
        return bool(await self.client.ping())

    async def admit(self, key: keys.Key, lease: str) -> quota.Verdict:
        allowed, kind, ms = await self._admit(keys=self._names(key.id), args=[
            key.requests_per_minute or 0, key.tokens_per_minute or 0, key.max_concurrent or 0, lease,
            self.lease_ttl_ms])
        if int(allowed):
            return quota.ALLOWED
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        return quota.Verdict(False, kind, max(1, math.ceil(int(ms) / 1000)))

    async def release(self, key: keys.Key, lease: str) -> None:
        if key.max_concurrent is not None:
            await self.client.zrem(self._names(key.id)[2], lease)

    async def renew(self, leases: list[tuple[keys.Key, str]]) -> None:
        """Push the expiry of the leases still in flight (every lease_ttl/3)."""
        if not leases:
            return
        now_s, now_us = await self.client.time()
        expiry = now_s * 1000 + now_us // 1000 + self.lease_ttl_ms
        async with self.client.pipeline(transaction=False) as pipe:
            for key, lease in leases:
                pipe.zadd(self._names(key.id)[2], {lease: expiry}, xx=True)
            await pipe.execute()

    async def charge(self, key: keys.Key, tokens: int, usage: quota.Usage) -> None:
        names = self._names(key.id)
        args: list[Any] = [key.tokens_per_minute or 0, tokens]
        for field, value in usage.as_fields().items():
            args += [field, value]
        await self._charge(keys=[names[1], names[3]], args=args)

    async def add_usage(self, usage: dict[str, quota.Usage]) -> None:
        """Usage counted locally while Redis was away, handed in once it is back."""
        async with self.client.pipeline(transaction=False) as pipe:
            for key_id, counted in usage.items():
                for field, value in counted.as_fields().items():
                    pipe.hincrby(self._names(key_id)[3], field, value)
            await pipe.execute()

    async def harvest(self, key_ids: list[str]) -> dict[str, quota.Usage]:
        out: dict[str, quota.Usage] = {}
        async with self.client.pipeline(transaction=False) as pipe:
            for key_id in key_ids:
                await self._harvest(keys=[self._names(key_id)[3]], client=pipe)
            replies = await pipe.execute()
        for key_id, flat in zip(key_ids, replies):
            fields = dict(zip(flat[::2], flat[1::2]))
            if fields:
                out[key_id] = quota.Usage.from_fields(fields)
        return out

    async def close(self) -> None:
        await self.client.aclose()
