"""Bounded logging for something that keeps failing: one warning when it starts, a reminder a
minute, one line when it recovers. During an API-server outage every loop fails every few
seconds; a traceback each time would bury the one line that matters."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable


class QuietLog:
    def __init__(self, log: logging.Logger, what: str, *, remind_every: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log, self.what, self.remind_every = log, what, remind_every
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._since = 0.0
        self._last_said = float("-inf")

    @property
    def failing(self) -> bool:
        return self._failures > 0

    def failure(self, error: BaseException | str) -> None:
        now = self._clock()
        with self._lock:
            self._failures += 1
            first = self._failures == 1
            if first:
                self._since = now
            remind = not first and now - self._last_said >= self.remind_every
            if first or remind:
                self._last_said = now
            count, since = self._failures, self._since
        text = _describe(error)
        if first:
            self.log.warning("%s failed: %s (retrying with backoff)", self.what, text)
        elif remind:
            self.log.warning("%s still failing after %d attempts over %.0f s: %s", self.what, count, now - since, text)
        else:
            self.log.debug("%s failed again: %s", self.what, text)

    def success(self) -> None:
        with self._lock:
            count, since = self._failures, self._since
            self._failures = 0
        if count:
            self.log.info("%s recovered after %d failed attempts over %.0f s", self.what, count,
                          self._clock() - since)


def _describe(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    status = getattr(error, "status", None)
    reason = getattr(error, "reason", None)
    if status is not None and reason is not None:  # ApiException: the status line, not the body
        return f"HTTP {status} {reason}".strip() if status else str(reason).splitlines()[0][:300]
    return f"{type(error).__name__}: {str(error).splitlines()[0][:300] if str(error) else ''}"
