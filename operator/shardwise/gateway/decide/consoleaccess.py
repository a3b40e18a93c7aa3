"""Who may open the console when keys are on (pure).

The console shows every key's usage and cost, so with `serve --auth` it asks for an API key whose
APIKey says `spec.console: true`. The key comes as `Authorization: Bearer <key>` (curl, scripts) or
as the password of HTTP Basic (a browser's own login prompt; the user name is ignored), so a person
needs nothing but the browser. No key, or a key the table does not know: 401 (and the Basic
challenge); a known key without console access: 403.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterable, Mapping
from typing import Any

from shardwise.gateway.decide import keys

CHALLENGE = 'Basic realm="shardwise console", charset="UTF-8"'


def granted(api_keys: Iterable[Mapping[str, Any]]) -> frozenset[str]:
    """The ids of the APIKeys that open the console (`spec.console: true`, not disabled)."""
    out = set()
    for obj in api_keys:
        spec = obj.get("spec")
        if isinstance(spec, Mapping) and spec.get("console") is True and not spec.get("disabled"):
            out.add(keys.key_id(obj))
    return frozenset(out)


def credential(authorization: str | None) -> str | None:
    """The key in `Bearer <key>` or in Basic's password, else None."""
    token = keys.bearer(authorization)
    if token is not None or not authorization:
        return token
    scheme, _, encoded = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        _, sep, password = base64.b64decode(encoded.strip(), validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return password.strip() or None if sep else None


def verdict(authorization: str | None, table: keys.KeyTable, console_ids: frozenset[str]) -> int:
    """200 to show the page, 401 without a known key, 403 for a key without console access."""
    token = credential(authorization)
    key = table.lookup(token) if token is not None else None
    if key is None:
        return 401
    return 200 if key.id in console_ids else 403
