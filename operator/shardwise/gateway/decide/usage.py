"""Tokens read from a response (pure).

The gateway's observe filter (observe_lua.py) reads the body inside Envoy and hands over only
the text from its last `"usage"` key on and, for a stream, the content events it counted:
`tokens_of` turns those into tokens, with the rules below. `Tally` applies the same rules to a
whole body fed chunk by chunk (the reference the Lua script is tested against).

A stream's usage is in its last data event when the client asked for it
(`stream_options.include_usage`, as vLLM and OpenAI send it); otherwise the completion tokens are
the content events counted (one token per event, as vLLM streams without speculative decoding)
and the prompt tokens are unknown. A JSON answer is kept (bounded) and its `usage` read at the end.
Only a tail of a stream is kept, so a long generation costs a few kilobytes.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

TAIL_BYTES = 8192
JSON_LIMIT_BYTES = 1024 * 1024


@dataclasses.dataclass
class Tally:
    streaming: bool
    events: int = 0
    _tail: bytes = b""
    _json: bytearray = dataclasses.field(default_factory=bytearray)
    _pending: bytes = b""

    def feed(self, chunk: bytes) -> None:
        if not self.streaming:
            if len(self._json) + len(chunk) <= JSON_LIMIT_BYTES:
                self._json += chunk
            return
        data = self._pending + chunk
        cut = data.rfind(b"\n") + 1
        complete, self._pending = data[:cut], data[cut:][-TAIL_BYTES:]  # an event cut between chunks
        for line in complete.split(b"\n"):
            # Content events only: not the role event, the usage event (no choices) or [DONE].
            if (line.startswith(b"data:") and line[5:].strip() != b"[DONE]" and b'"choices":[]' not in line
                    and b'"role"' not in line):
                self.events += 1
        self._tail = (self._tail + complete)[-TAIL_BYTES:]

    def tokens(self) -> tuple[int | None, int | None]:
        """(prompt, completion) tokens; None where the response did not say."""
        usage = self._usage()
        if usage is not None:
            return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))
        return None, (self.events if self.streaming else None)

    def _usage(self) -> dict[str, Any] | None:
        if not self.streaming:
            try:
                body = json.loads(bytes(self._json))
            except ValueError:
                return None
            usage = body.get("usage") if isinstance(body, dict) else None
            return usage if isinstance(usage, dict) else None
        for line in reversed((self._tail + self._pending).split(b"\n")):
            if line.startswith(b"data:") and b'"usage"' in line:
                try:
                    event = json.loads(line[5:])
                except ValueError:
                    continue
                usage = event.get("usage") if isinstance(event, dict) else None
                if isinstance(usage, dict):
                    return usage
        return None


def _int(value: Any) -> int | None:
    # Not a bool: a broken engine's `"completion_tokens": true` is no count (Python's True is 1).
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


_USAGE_KEY = re.compile(r'"usage"\s*:\s*')
_DECODER = json.JSONDecoder()


def parse_usage(text: str | bytes | None) -> tuple[int | None, int | None] | None:
    """(prompt, completion) from text beginning at a `"usage": {...}` key; None when it holds no
    usage object (absent, null, cut short, not JSON)."""
    if not text:
        return None
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    key = _USAGE_KEY.match(text)
    if key is None:
        return None
    try:
        usage, _ = _DECODER.raw_decode(text, key.end())
    except ValueError:
        return None
    if not isinstance(usage, dict):
        return None
    return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))


def cached_of(text: str | bytes | None) -> int:
    """The prompt tokens the provider served from its cache (OpenAI's
    `usage.prompt_tokens_details.cached_tokens`), charged at the cached-input price; 0 when the
    usage does not say."""
    if not text:
        return 0
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    key = _USAGE_KEY.match(text)
    if key is None:
        return 0
    try:
        found, _ = _DECODER.raw_decode(text, key.end())
    except ValueError:
        return 0
    details = found.get("prompt_tokens_details") if isinstance(found, dict) else None
    return (_int(details.get("cached_tokens")) or 0) if isinstance(details, dict) else 0


def tokens_of(usage_text: str | bytes | None, events: int | None) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens of a response from what the observe filter kept: its usage, or
    for a stream (`events` not None) without one the content events as completion tokens."""
    found = parse_usage(usage_text)
    if found is not None:
        return found
    return None, events
