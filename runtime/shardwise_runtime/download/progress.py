"""Download progress as plain data: bytes done of total, rate over a sliding window, time left.

Pure (the clock is an argument), so the rate and ETA rules are unit-tested without a download.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Any

RATE_WINDOW_S = 10.0


@dataclasses.dataclass
class Progress:
    state: str = "Resolving"  # Resolving | Downloading | Verifying | Complete | Failed
    commit: str | None = None
    bytes_total: int = 0
    bytes_done: int = 0
    files_total: int = 0
    files_done: int = 0
    reason: str | None = None
    message: str | None = None
    _samples: collections.deque[tuple[float, int]] = dataclasses.field(default_factory=collections.deque, repr=False)

    def sample(self, now: float, bytes_done: int) -> None:
        """Record the bytes on disk at `now`; old samples leave the window."""
        self.bytes_done = bytes_done
        self._samples.append((now, bytes_done))
        while len(self._samples) > 2 and now - self._samples[0][0] > RATE_WINDOW_S:
            self._samples.popleft()

    def rate(self) -> float:
        """Bytes per second over the window (0 until two samples a moment apart exist)."""
        if len(self._samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self._samples[0], self._samples[-1]
        return max(b1 - b0, 0) / (t1 - t0) if t1 - t0 > 0.2 else 0.0

    def as_dict(self) -> dict[str, Any]:
        rate = self.rate()
        left = max(self.bytes_total - self.bytes_done, 0)
        out: dict[str, Any] = {
            "state": self.state, "commit": self.commit, "bytesTotal": self.bytes_total,
            "bytesDone": self.bytes_done, "filesTotal": self.files_total, "filesDone": self.files_done,
            "bytesPerSecond": round(rate), "etaSeconds": round(left / rate) if rate > 0 and left else None,
        }
        if self.reason:
            out.update(reason=self.reason, message=self.message)
        return out
