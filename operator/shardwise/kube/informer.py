"""List + watch of one kind into an in-memory store: client-go's reflector and informer, in a thread.

- The list is paginated (`limit`/`continue`): each page is transformed (slimmed, or dropped) and
  released before the next, so no whole list response is held in memory.
- A (re)list replaces the store: objects that are gone are dropped and reported as deleted.
- `synced` is set once the first list is in the store; nothing may be decided from the store
  before that (the manager waits for every informer).
- The watch resumes from the last resourceVersion (bookmarks keep it fresh); "410 Gone" relists.
- Failures back off exponentially with jitter and are logged boundedly (quietlog).
- `on_change(old, new)` runs after the store changed, outside the store's lock, never for an
  event that carries a resourceVersion the store already has (our own write seen earlier).
"""

from __future__ import annotations

import logging
import random
import threading
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from shardwise.kube.client import ApiException, Kube
from shardwise.kube.quietlog import QuietLog

log = logging.getLogger(__name__)

Obj = dict[str, Any]
Key = tuple[str, str]
Transform = Callable[[Obj], Obj | None]
OnChange = Callable[[Obj | None, Obj | None], None]


def key_of(obj: Obj) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace") or "", meta["name"]


def strip_managed_fields(obj: Obj) -> Obj:
    """What we keep of a full object: everything but managedFields (often half its size)."""
    meta = obj.get("metadata") or {}
    if "managedFields" in meta:
        obj = {**obj, "metadata": {k: v for k, v in meta.items() if k != "managedFields"}}
    return obj


def newer(candidate: Obj, stored: Obj | None) -> bool:
    """Is `candidate` a later version than `stored`?

    resourceVersions are opaque by contract, but etcd3's are increasing integers; where either
    is not one, the candidate wins (at worst one redundant store update or reconcile).
    """
    if stored is None:
        return True
    try:
        return int(candidate["metadata"]["resourceVersion"]) > int(stored["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return True


class Gone(Exception):
    """The watch's resourceVersion is too old (HTTP 410): relist."""


class Informer:
    def __init__(self, kube: Kube, name: str, path: str, *, label_selector: str | None = None,
                 field_selector: str | None = None, transform: Transform = strip_managed_fields,
                 index: Callable[[Obj], Hashable | None] | None = None,
                 on_change: OnChange | None = None, optional: bool = False, page_size: int = 500,
                 on_contact: Callable[[bool], None] | None = None,
                 rand: Callable[[], float] = random.random) -> None:
        self.kube, self.name, self.path = kube, name, path
        self.selectors = {k: v for k, v in (("labelSelector", label_selector), ("fieldSelector", field_selector)) if v}
        self.transform, self.index_fn, self.on_change = transform, index, on_change
        self.optional = optional  # a kind whose CRD may be absent: an empty, synced store then
        self.page_size = page_size
        self._on_contact = on_contact or (lambda ok: None)
        self._rand = rand
        self.synced = threading.Event()
        self.installed = True
        self._lock = threading.Lock()
        self._store: dict[Key, Obj] = {}
        self._index: dict[Hashable, set[Key]] = {}
        self._rv = ""
        self._quiet = QuietLog(log, f"{name} list/watch")
        self.relists = 0

    # -- reads -------------------------------------------------------------------------------
    def get(self, key: Key) -> Obj | None:
        with self._lock:
            return self._store.get(key)

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._store.values())

    def by_index(self, value: Hashable) -> list[Obj]:
        with self._lock:
            return [self._store[k] for k in self._index.get(value, ())]

    def __len__(self) -> int:
        with self._lock:
            return len(self._store)

    # -- writes to the store -----------------------------------------------------------------
    def observe_write(self, obj: Obj) -> None:
        """Our own write's answer: store it now if newer, so the next read is not stale."""
        slim = self.transform(obj)
        key = key_of(obj)
        with self._lock:
            if slim is not None and newer(slim, self._store.get(key)):
                self._put(key, slim)

    def apply_event(self, kind: str, obj: Obj) -> None:
        """One watch event into the store, then `on_change` if it changed anything."""
        key = key_of(obj)
        slim = None if kind == "DELETED" else self.transform(obj)
        with self._lock:
            old = self._store.get(key)
            if slim is None:
                if old is None:
                    return
                self._drop(key)
            else:
                if old is not None and not newer(slim, old):
                    return
                self._put(key, slim)
        if self.on_change is not None:
            self.on_change(old, slim)

    def replace(self, objects: Iterable[Obj]) -> None:
        """A full list: the store becomes exactly this; the differences are reported."""
        fresh: dict[Key, Obj] = {}
        for obj in objects:
            fresh[key_of(obj)] = obj
        with self._lock:
            old_store = self._store
            self._store = {}
            self._index = {}
            for key, obj in fresh.items():
                self._put(key, obj)
        if self.on_change is None:
            return
        for key, old in old_store.items():
            if key not in fresh:
                self.on_change(old, None)
        for key, obj in fresh.items():
            old = old_store.get(key)
            if old is None or newer(obj, old):
                self.on_change(old, obj)

    def _put(self, key: Key, obj: Obj) -> None:
        self._drop(key)
        self._store[key] = obj
        if self.index_fn is not None:
            value = self.index_fn(obj)
            if value is not None:
                self._index.setdefault(value, set()).add(key)

    def _drop(self, key: Key) -> None:
        old = self._store.pop(key, None)
        if old is not None and self.index_fn is not None:
            value = self.index_fn(old)
            if value is not None:
                keys = self._index.get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._index[value]

    # -- the loop ----------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> None:
        failures = 0
        need_list = True
        while not stop.is_set():
            try:
                if need_list:
                    self._list()
                    need_list = False
                self._watch(stop)
                failures = 0
                self._quiet.success()
            except Gone:
                need_list = True
                failures = 0
            except NotInstalled:
                if stop.wait(60.0):  # the CRD may be installed later
                    return
                need_list = True
            except Exception as exc:  # noqa: BLE001 - any failure: back off and retry
                self._on_contact(False)
                self._quiet.failure(exc)
                failures += 1
                # Capped low: after an outage the caches must be current again within seconds.
                delay = min(5.0, 0.5 * 2 ** min(failures - 1, 4)) * (0.5 + self._rand())
                if stop.wait(delay):
                    return

    def _list(self) -> None:
        query: dict[str, Any] = {**self.selectors, "limit": self.page_size}
        kept: list[Obj] = []
        rv = ""
        while True:
            try:
                page = self.kube.request("GET", self.path, query=query)
            except ApiException as exc:
                if exc.status == 404 and self.optional:
                    self._on_contact(True)
                    self.installed = False
                    self.replace([])
                    self.synced.set()
                    raise NotInstalled() from exc
                if exc.status == 410:  # the continue token expired mid-list: start over
                    query.pop("continue", None)
                    kept.clear()
                    continue
                raise
            self._on_contact(True)
            for obj in page.get("items") or []:
                slim = self.transform(obj)
                if slim is not None:
                    kept.append(slim)
            meta = page.get("metadata") or {}
            rv = meta.get("resourceVersion") or rv
            token = meta.get("continue")
            del page
            if not token:
                break
            query["continue"] = token
        self.installed = True
        self.replace(kept)
        self._rv = rv
        self.relists += 1
        self.synced.set()
        self._quiet.success()

    def _watch(self, stop: threading.Event) -> None:
        timeout = int(240 + 240 * self._rand())  # client-go: 5-10 min, spread so watches do not align
        query = {**self.selectors, "resourceVersion": self._rv, "allowWatchBookmarks": "true",
                 "timeoutSeconds": timeout}
        try:
            events = self.kube.watch(self.path, query, timeout_s=timeout + 30)
            for event in events:
                self._on_contact(True)
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise Gone()
                    raise RuntimeError(f"watch error: {obj.get('message')}")
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    self.apply_event(kind, obj)
                if rv:
                    self._rv = rv
                if stop.is_set():
                    return
        except ApiException as exc:
            if exc.status == 410:
                raise Gone() from exc
            raise


class NotInstalled(Exception):
    """An optional kind's API is not served (its CRD is not installed)."""


def wait_for_sync(informers: Iterable[Informer], stop: threading.Event, poll: float = 0.1) -> bool:
    """Block until every informer has synced (client-go's WaitForCacheSync); False if stopped."""
    pending = list(informers)
    while pending:
        if stop.is_set():
            return False
        pending = [i for i in pending if not i.synced.wait(poll)]
    return True

