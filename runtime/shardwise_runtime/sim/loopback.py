"""The one guard that keeps every simulated engine and load generator on loopback.

The simulator exists for GPU-less tests and demos; binding or sending anywhere but 127.0.0.0/8
(or ::1) would make a test reach into a real network, so every entry point checks here.
"""

from __future__ import annotations

import ipaddress
import socket
import urllib.parse


def is_loopback_host(host: str) -> bool:
    """True for `localhost` and IP literals in 127.0.0.0/8 or ::1; names are never resolved."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_loopback_url(url: str) -> str:
    """Return `url` unchanged if it targets a loopback host over http(s), else raise ValueError."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError(f"not an http(s) URL: {url!r}")
    if not is_loopback_host(parsed.hostname):
        raise ValueError(
            f"refusing non-loopback target {parsed.hostname!r}: the simulator only "
            "talks to 127.0.0.0/8 and ::1"
        )
    return url


def free_port() -> int:
    """A TCP port free on loopback right now (the OS picks it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
