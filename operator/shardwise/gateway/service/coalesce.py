"""One rebuild on the event loop for a burst of informer changes."""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescedRebuild:
    """Informer callbacks run on their own threads; each change asks for `rebuild()` on the event loop,
    and changes that arrive before it runs share one call (a relist of a thousand objects rebuilds
    once). Until `attach`, changes are ignored: the first rebuild follows the informers' sync."""

    _loop: asyncio.AbstractEventLoop | None = None
    _pending = False

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def rebuild(self) -> None:
        raise NotImplementedError

    def _changed(self, old: Any, new: Any) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._schedule)

    def _schedule(self) -> None:
        if not self._pending:
            self._pending = True
            asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        self._pending = False
        self.rebuild()
