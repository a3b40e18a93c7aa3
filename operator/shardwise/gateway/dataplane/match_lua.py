"""The match filter's Lua script: what the fast path's routes match on, taken from the body in Envoy.

It runs after the json_to_metadata filter, which buffered the body and put its top-level `model`
in the dynamic metadata (`NAMESPACE`/`model`). Per request it:

- removes the client's own copies of every header shardwise sets (a client cannot pick a route,
  a model label or a key id by sending them), and clears the route cache if there were any;
- copies the model into `MATCH_HEADER`, the header the fast routes match (fastpath.py);
- sets `AFFINITY_HEADER` to a 32-bit FNV-1a hash (hex) of the body's first `PREFIX_BYTES` bytes
  from its `"messages"`, `"prompt"` or `"input"` key on: the raw JSON of the conversation's start,
  the same for every turn of a conversation whose start is at least that long (the openai client
  writes a body's keys in one order); the fast routes hash on it;
- clears the route cache, so the route is chosen again with these headers.

A body without a model (not JSON, no `model`, another content type) sets neither header and takes
the ext_proc route, which answers it.
"""

from __future__ import annotations

from shardwise.gateway.decide import picker

NAMESPACE = "shardwise.request"
MATCH_HEADER = "x-shardwise-route-model"
AFFINITY_HEADER = "x-shardwise-affinity"
PREFIX_BYTES = picker.PREFIX_CHARS
SCAN_BYTES = 16384  # where the prompt or messages key must begin: the body's head, not all of it

_SOURCE = r"""
local NS = "%(namespace)s"
local MATCH, AFFINITY = "%(match)s", "%(affinity)s"
local SET_BY_SHARDWISE = {MATCH, AFFINITY, %(cleared)s}
local KEYS = {'"messages"', '"prompt"', '"input"'}
local PREFIX, SCAN = %(prefix)d, %(scan)d
local find, byte, min = string.find, string.byte, math.min
local bxor, lshift, tobit, tohex = bit.bxor, bit.lshift, bit.tobit, bit.tohex

local function fnv1a(text, from, to)
  local h = tobit(2166136261)
  for i = from, to do
    h = bxor(h, byte(text, i))
    h = tobit(lshift(h, 24) + h * 403)  -- h * 16777619 (= 2^24 + 403), wrapped to 32 bits exactly
  end
  return tohex(h)
end

function envoy_on_request(handle)
  local found = handle:streamInfo():dynamicMetadata():get(NS)
  local model = found and found["model"]
  local affinity = nil
  if type(model) ~= "string" or model == "" or find(model, "[%%z\r\n]") then
    model = nil  -- no model, or none a header can carry: the picker's route answers it
  else
    local body = handle:body()  -- buffered whole by json_to_metadata already: no wait, but a yield
    if body then
      local raw = body:getBytes(0, min(body:length(), SCAN))
      for _, key in ipairs(KEYS) do
        local at = find(raw, key, 1, true)
        if at then
          affinity = fnv1a(raw, at, min(#raw, at + PREFIX - 1))
          break
        end
      end
    end
  end
  -- Envoy's wrappers do not outlive a yield: the headers are fetched after the body.
  local headers = handle:headers()
  local sent = false  -- a client's copy may already have chosen a route: choose again without it
  for _, name in ipairs(SET_BY_SHARDWISE) do
    if headers:get(name) then sent = true; headers:remove(name) end
  end
  if model then
    headers:replace(MATCH, model)
    if affinity then headers:replace(AFFINITY, affinity) end
  end
  if model or sent then handle:clearRouteCache() end
end
"""


def source(cleared: tuple[str, ...]) -> str:
    """The script; `cleared`: the other headers shardwise sets, removed from what a client sent."""
    return _SOURCE % {"namespace": NAMESPACE, "match": MATCH_HEADER, "affinity": AFFINITY_HEADER,
                      "cleared": ", ".join(f'"{name}"' for name in cleared),
                      "prefix": PREFIX_BYTES, "scan": SCAN_BYTES}
