"""The keyed fast path: a key's request for a served model authenticated inside Envoy (issue 41).

With `--auth`, every request used to cross into Python twice (ext_proc headers and body) just to
look a key up; the keys filter's Lua (`FILTER`, after the match filter) does the common case
itself. The service pushes the key table over RDS as the picker route's metadata (`metadata`):
each usable key's sha256 (the only form the gateway keeps, keys.slim_secret) with its id and, if
the key is narrowed, its models. Per request the script takes the bearer token, hashes it
(SHA-256 in LuaJIT: Envoy's Lua has no hash of its own, and the table must hold no plaintext),
looks the digest up (one field of the route's metadata, not the whole table) and, when the key may
use the body's model, sets `KEY_HEADER` to the key's id and clears the route cache. Only then does
a fast route match: in keyed mode they require that header (fastpath.py), and they drop the
`authorization` header before the engine as the picker's answer does.

Anything else leaves the request as it was and it takes the picker's route, where ext_proc
answers exactly as before: no key or an unknown one (401), a model the key may not use (404),
a key with limits (RPM, TPM or concurrency: their buckets and leases are still Redis calls from
the service, so those keys never take this path), a stream that set `stream_options` without
`include_usage`, `/v1/models`. A script that fails sets no header either: the fast path fails
closed, to the picker.

A stream without `stream_options` gets `"stream_options":{"include_usage":true}` inserted at the
start of its body, as the picker's `requests.with_stream_usage` adds it: the key is charged from
that final usage chunk. Charging is the observer's, from the access log, as on the slow path (the
header is in the entry): each request once, off the client's path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from shardwise.gateway.decide import keys, requests

FILTER = "shardwise.keys"  # the filter's name: its route metadata lives under it
KEY_HEADER = "x-shardwise-key"  # envoy.KEY_HEADER: the observer charges the id it carries
MARK = "keyed"  # present in the metadata: keys are on and this is the table

_SOURCE = r"""
local MATCH, KEY, NS, MARK = "%(match)s", "%(key)s", "%(namespace)s", "%(mark)s"
local STREAMING = {%(streaming)s}
local USAGE = '"stream_options":{"include_usage":true},'
local band, bor, bxor, bnot = bit.band, bit.bor, bit.bxor, bit.bnot
local rshift, lshift, ror, tobit, tohex = bit.rshift, bit.lshift, bit.ror, bit.tobit, bit.tohex
local byte, char, rep, find, sub, match, lower = string.byte, string.char, string.rep, string.find, string.sub, string.match, string.lower
local floor = math.floor

local K = {
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2}
local H0 = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

local function be32(n) return char(band(rshift(n, 24), 255), band(rshift(n, 16), 255), band(rshift(n, 8), 255), band(n, 255)) end

-- FIPS 180-4 SHA-256, lowercase hex: what keys.hash_key gives for the same text.
local function sha256(text)
  local bits = #text * 8
  local msg = text .. "\128" .. rep("\0", (55 - #text) %% 64) .. be32(floor(bits / 4294967296)) .. be32(bits %% 4294967296)
  local h1, h2, h3, h4, h5, h6, h7, h8 = H0[1], H0[2], H0[3], H0[4], H0[5], H0[6], H0[7], H0[8]
  local w = {}
  for at = 1, #msg, 64 do
    for i = 0, 15 do
      local a, b, c, d = byte(msg, at + i * 4, at + i * 4 + 3)
      w[i] = bor(lshift(a, 24), lshift(b, 16), lshift(c, 8), d)
    end
    for i = 16, 63 do
      local x, y = w[i - 15], w[i - 2]
      w[i] = tobit(w[i - 16] + bxor(ror(x, 7), ror(x, 18), rshift(x, 3)) + w[i - 7]
                   + bxor(ror(y, 17), ror(y, 19), rshift(y, 10)))
    end
    local a, b, c, d, e, f, g, h = h1, h2, h3, h4, h5, h6, h7, h8
    for i = 0, 63 do
      local t1 = tobit(h + bxor(ror(e, 6), ror(e, 11), ror(e, 25)) + bxor(band(e, f), band(bnot(e), g)) + K[i + 1] + w[i])
      local t2 = tobit(bxor(ror(a, 2), ror(a, 13), ror(a, 22)) + bxor(band(a, b), band(a, c), band(b, c)))
      h, g, f, e, d, c, b, a = g, f, e, tobit(d + t1), c, b, a, tobit(t1 + t2)
    end
    h1, h2, h3, h4 = tobit(h1 + a), tobit(h2 + b), tobit(h3 + c), tobit(h4 + d)
    h5, h6, h7, h8 = tobit(h5 + e), tobit(h6 + f), tobit(h7 + g), tobit(h8 + h)
  end
  return tohex(h1) .. tohex(h2) .. tohex(h3) .. tohex(h4) .. tohex(h5) .. tohex(h6) .. tohex(h7) .. tohex(h8)
end

-- keys.bearer: "Bearer <token>", the scheme in any case, the token trimmed.
local function bearer(value)
  if not value then return nil end
  local scheme, token = match(value, "^%%s*(%%S+) (.-)%%s*$")
  if not scheme or lower(scheme) ~= "bearer" then return nil end
  token = match(token, "^%%s*(.-)$")
  if token == "" then return nil end
  return token
end

function envoy_on_request(handle)
  local headers = handle:headers()
  local model = headers:get(MATCH)  -- set by the match filter: a JSON body with a model
  if not model then return end
  local meta = handle:metadata()
  if not meta:get(MARK) then return end  -- keys off, or the route already chosen
  local token = bearer(headers:get("authorization"))
  if not token then return end
  local key = meta:get(sha256(token))
  if type(key) ~= "table" or type(key.id) ~= "string" then return end
  if key.models and not key.models[model] then return end  -- the picker answers its 404
  local path = match(headers:get(":path") or "", "^[^?]*")
  local found = handle:streamInfo():dynamicMetadata():get(NS)
  if STREAMING[path] and found and found["stream"] == true and found["include_usage"] ~= true then
    local body = handle:body()  -- buffered whole already (json_to_metadata): no wait, but a yield
    if not body then return end
    local raw = body:getBytes(0, body:length())
    if find(raw, '"stream_options"', 1, true) then return end  -- theirs, merged by the picker
    local open = find(raw, "{", 1, true)
    if not open then return end
    body:setBytes(sub(raw, 1, open) .. USAGE .. sub(raw, open + 1))
    headers = handle:headers()  -- Envoy's wrappers do not outlive a yield
  end
  headers:replace(KEY, key.id)
  handle:clearRouteCache()
end
"""


def source(namespace: str, match_header: str) -> str:
    """The script; `namespace`: json_to_metadata's (stream, include_usage); `match_header`: the model."""
    return _SOURCE % {"match": match_header, "key": KEY_HEADER, "namespace": namespace, "mark": MARK,
                      "streaming": ", ".join(f'["{p}"] = true' for p in sorted(requests.STREAMING_PATHS))}


def fast_keys(table: keys.KeyTable) -> dict[str, keys.Key]:
    """The keys Envoy may admit alone, by digest: those without limits (a limit is a bucket or a
    lease in the quota store, which only the service holds so far)."""
    return {digest: key for digest, key in table.by_hash.items() if not key.limited}


def metadata(table: keys.KeyTable) -> dict[str, Any]:
    """The picker route's metadata under FILTER: the mark and each fast key's digest -> its id and,
    for a narrowed key, its models (a set: one lookup per request)."""
    entries: dict[str, Any] = {MARK: True}
    for digest, key in sorted(fast_keys(table).items()):
        entry: dict[str, Any] = {"id": key.id}
        if key.models:
            entry["models"] = {model: True for model in sorted(key.models)}
        entries[digest] = entry
    return entries


def key_ids(entries: Mapping[str, Any]) -> list[str]:
    """The ids in a metadata table (for logs and tests)."""
    return sorted(v["id"] for k, v in entries.items() if k != MARK)
