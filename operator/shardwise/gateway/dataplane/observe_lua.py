"""The observe filter's Lua script: what the metrics need from a response, measured inside Envoy.

Envoy runs it (envoy.filters.http.lua, LuaJIT) on every response; body chunks stream through it
unbuffered (`bodyChunks()`), so it adds no wait. Per response it leaves, in the stream's dynamic
metadata under `NAMESPACE`:

- `first_byte_us`: the wall clock (microseconds since the epoch, a string) at the first non-empty
  body chunk: a stream's first token;
- `usage`: the text from the last `"usage": {` key on (at most `WINDOW` bytes), for
  `usage.parse_usage`; in a stream, of the last data event that has one (the final usage event
  vLLM and OpenAI send with `stream_options.include_usage`), in a JSON answer its top-level usage;
- `events` (streams only, `text/event-stream`): the content events, as `usage.Tally` counts them
  (data events that are not the role event, the usage event or `[DONE]`); exact at the end of the
  stream, and written every `EVENTS_STEP` events as they come, so a stream that breaks says how
  many it streamed less fewer than `EVENTS_STEP` (a write per event was a third of the filter's
  CPU: each crosses into Envoy's metadata; measured on the gateway bench);
- `end`: true once the response reached its end of stream; absent when it broke (engine died,
  client left: Envoy then never resumes the script).

The access log (envoy.py: the HTTP gRPC access logger) sends that metadata, the status and
Envoy's own timings to the service once per request (observer.py). Only a partial line (a stream)
or 32 bytes (a JSON answer) are carried between chunks, plus the usage window: a long generation
costs a few kilobytes, never its body.
"""

from __future__ import annotations

NAMESPACE = "shardwise.observe"
WINDOW = 2048  # bytes kept from the usage key on: a usage object is a few hundred
LINE_LIMIT = 65536  # a longer stream line (huge logprobs) keeps its head and its last WINDOW bytes
EVENTS_STEP = 8  # a broken stream's count is at most this many events short

SOURCE = r"""
local NS = "%(namespace)s"
local WINDOW = %(window)d
local LINE_LIMIT = %(line_limit)d
local STEP = %(step)d
local CARRY = 32
local USAGE = '"usage"%%s*:%%s*{'
local find, sub, byte = string.find, string.sub, string.byte

-- One data line of a stream (without its "data:"): is it a content event, and its usage text.
local function line_of(line)
  local content = not (#line < 16 and find(line, "[DONE]", 1, true))
    and not find(line, '"choices":[]', 1, true) and not find(line, '"role"', 1, true)
  local usage = nil
  local at = find(line, '"usage"', 1, true) and find(line, USAGE)
  if at then
    local last = at
    while true do  -- the last usage key of the line
      local again = find(line, USAGE, last + 1)
      if not again then break end
      last = again
    end
    usage = sub(line, last, last + WINDOW - 1)
  end
  return content, usage
end

function envoy_on_response(handle)
  -- Envoy's wrappers last until the script yields (each chunk): fetched again for every write.
  local function set(key, value) handle:streamInfo():dynamicMetadata():set(NS, key, value) end
  -- which path served (issue 42): a provider's cluster, from the picker's shardwise.route metadata
  -- (a hosted model, or a waking one spilled over), else an engine (the route's served header)
  local served = handle:headers()
  local routed = handle:streamInfo():dynamicMetadata():get("shardwise.route")
  if routed ~= nil and routed["provider"] ~= nil then
    served:replace("x-shardwise-served-by", routed["provider"])
  elseif served:get("x-gateway-destination-endpoint-served") ~= nil then
    served:replace("x-shardwise-served-by", "self-hosted")
  else
    served:remove("x-shardwise-served-by")
  end
  local sse = find(handle:headers():get("content-type") or "", "text/event-stream", 1, true) ~= nil
  local first, events, counted, usage = true, 0, -1, nil
  if sse then  -- a stream that breaks before its first event is still a stream
    counted = 0
    set("events", 0)
  end
  local pending = ""              -- a stream: the line not ended yet
  local carry, need = "", 0       -- a JSON answer: the previous chunk's tail, usage bytes still to take
  for chunk in handle:bodyChunks() do
    local n = chunk:length()
    if n > 0 then
      if first then
        first = false
        set("first_byte_us", handle:timestampString(EnvoyTimestampResolution.MICROSECOND))
      end
      local data = chunk:getBytes(0, n)
      if sse then
        local buf = pending == "" and data or pending .. data
        local pos = 1
        while true do
          local nl = find(buf, "\n", pos, true)
          if not nl then break end
          if byte(buf, pos) == 100 and sub(buf, pos, pos + 4) == "data:" then
            local content, found = line_of(sub(buf, pos + 5, nl - 1))
            if content then events = events + 1 end
            if found then usage = found end
          end
          pos = nl + 1
        end
        pending = sub(buf, pos)
        if #pending > LINE_LIMIT then pending = sub(pending, 1, 1024) .. sub(pending, -WINDOW) end
        if events - counted >= STEP then
          counted = events
          set("events", events)
        end
      else
        if need > 0 then
          local more = sub(data, 1, need)
          usage = usage .. more
          need = need - #more
        end
        local text = carry .. data
        local pos = 1
        while true do
          local s, e = find(text, USAGE, pos)
          if not s then break end
          if e > #carry then  -- not one the previous chunk already found
            usage = sub(text, s, s + WINDOW - 1)
            need = WINDOW - #usage
          end
          pos = s + 1
        end
        carry = sub(text, -CARRY)
      end
    end
  end
  if sse and byte(pending, 1) == 100 and sub(pending, 1, 5) == "data:" then
    local _, found = line_of(sub(pending, 6))  -- an unterminated last line: its usage only
    if found then usage = found end
  end
  if sse and counted ~= events then set("events", events) end
  if usage then set("usage", usage) end
  set("end", true)
end
""" % {"namespace": NAMESPACE, "window": WINDOW, "line_limit": LINE_LIMIT, "step": EVENTS_STEP}
