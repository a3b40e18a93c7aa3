"""The shape every periodic loop of the operator shares: one step per interval, as leader only,
failures logged boundedly and retried at the next interval.

The interval is measured start to start, so a slow step (many engines to scrape) does not drift
the loop by its own duration.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from shardwise.kube.quietlog import QuietLog


async def every(interval_s: float, step: Callable[[], Awaitable[None]], *, acting: Callable[[], bool],
                quiet: QuietLog, clock: Callable[[], float] = time.monotonic) -> None:
    """Run `step` every `interval_s` seconds while `acting()` (the leader), forever."""
    while True:
        started = clock()
        try:
            if acting():
                await step()
            quiet.success()
        except Exception as exc:  # noqa: BLE001 - an engine or the API server may be away: next interval
            quiet.failure(exc)
        await asyncio.sleep(max(0.0, interval_s - (clock() - started)))
