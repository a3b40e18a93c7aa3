"""API keys from the cluster: informers on APIKeys and labelled Secrets, and the one status writer.

Per watched namespace (or cluster-wide) two informers: `apikeys.shardwise.io` and the Secrets
labelled `shardwise.io/api-key=true` (server-side selector; `keys.slim_secret` keeps only the
key's sha256). Every change rebuilds the key table on the event loop, so a key created or
revoked is in force within a watch event (well under the 5 s promised).

The status writer: one replica at a time, the holder of the Lease `shardwise-gateway-keys`. Every
`status_interval_s` it takes the usage counted since its last round from Redis (or its own, with
no Redis), adds it to each APIKey's stored status and writes the difference with a merge patch
conditional on the resourceVersion it read (a 409 keeps the usage for the next round). Nothing
changed: nothing written.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from collections.abc import Callable
from typing import Any

from shardwise.api import apikeys
from shardwise.gateway.decide import keys, keystatus, quota
from shardwise.gateway.service.coalesce import CoalescedRebuild
from shardwise.gateway.service.gatekeeper import Gatekeeper
from shardwise.kube.client import ApiException, Kube, register_kind
from shardwise.kube.informer import Informer
from shardwise.kube.leader import LeaderElector
from shardwise.kube.quietlog import QuietLog

log = logging.getLogger(__name__)

register_kind(f"{apikeys.GROUP}/{apikeys.VERSION}", apikeys.KIND, apikeys.PLURAL)


def slim_apikey(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata") or {}
    return {"metadata": {k: meta[k] for k in ("name", "namespace", "resourceVersion", "generation",
                                              "deletionTimestamp") if k in meta},
            "spec": obj.get("spec") or {}, "status": obj.get("status") or {}}


class Keyring(CoalescedRebuild):
    def __init__(self, kube: Kube, gatekeeper: Gatekeeper, namespaces: tuple[str, ...], *,
                 on_contact: Callable[[bool], None] | None = None) -> None:
        self.kube, self.gatekeeper = kube, gatekeeper
        self.informers: list[Informer] = []
        self.apikeys: list[Informer] = []
        self.secrets: list[Informer] = []
        prefix = f"/apis/{apikeys.GROUP}/{apikeys.VERSION}"
        for ns in namespaces or ("",):
            scope = f"/namespaces/{ns}" if ns else ""
            self.apikeys.append(Informer(kube, f"APIKey{scope}", f"{prefix}{scope}/{apikeys.PLURAL}",
                                         transform=slim_apikey, on_change=self._changed, on_contact=on_contact))
            self.secrets.append(Informer(kube, f"Secret{scope}", f"/api/v1{scope}/secrets",
                                         label_selector=f"{apikeys.SECRET_LABEL}=true",
                                         transform=keys.slim_secret, on_change=self._changed,
                                         on_contact=on_contact))
        self.informers = self.apikeys + self.secrets
        settings = gatekeeper.settings
        self.elector = LeaderElector(kube, settings.lease_namespace, settings.lease_name)
        self.unwritten: dict[str, quota.Usage] = {}
        self._write_log = QuietLog(log, "APIKey status write")

    def threads(self, stop: threading.Event) -> list[threading.Thread]:
        return [threading.Thread(target=i.run, args=(stop,), name=i.name, daemon=True) for i in self.informers] + [
            threading.Thread(target=self.elector.run, args=(stop,), name="keys-lease", daemon=True)]

    # -- informers -> table -----------------------------------------------------------------
    def rebuild(self) -> None:
        table = keys.build_table([o for i in self.apikeys for o in i.items()],
                                 [o for i in self.secrets for o in i.items()])
        if dict(table.problems) != dict(self.gatekeeper.table.problems):
            for ident, problem in sorted(table.problems.items()):
                log.warning("API key %s not usable: %s", ident, problem)
        if dict(table.warnings) != dict(self.gatekeeper.table.warnings):
            for ident, warning in sorted(table.warnings.items()):
                log.warning("API key %s: %s", ident, warning)
        self.gatekeeper.set_table(table)

    # -- the status writer ------------------------------------------------------------------
    async def write_statuses(self) -> None:
        while True:
            await asyncio.sleep(self.gatekeeper.settings.status_interval_s)
            if not self.elector.acting():
                continue
            try:
                await self.write_once()
            except Exception as exc:  # noqa: BLE001 - the next round tries again
                self._write_log.failure(exc)

    async def write_once(self) -> int:
        """One round; returns the number of objects written."""
        objects = [o for i in self.apikeys for o in i.items() if not o["metadata"].get("deletionTimestamp")]
        ids = [keys.key_id(o) for o in objects]
        gatekeeper = self.gatekeeper
        if gatekeeper.store is None:
            taken = gatekeeper.take_pending()
        elif gatekeeper.store_up:
            try:
                taken = await gatekeeper.store.harvest(ids)
            except Exception:  # noqa: BLE001 - counted again next round; conditions still written
                taken = {}
        else:
            taken = {}
        for ident, usage in taken.items():
            self.unwritten.setdefault(ident, quota.Usage()).add(usage)
        store_up = None if gatekeeper.store is None else gatekeeper.store_up
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        table = gatekeeper.table
        written = 0
        for obj, ident in zip(objects, ids):
            desired = keystatus.desired_status(obj, self.unwritten.get(ident), problem=table.problems.get(ident),
                                               key_hash=table.hashes.get(ident), store_up=store_up, now=now,
                                               warning=table.warnings.get(ident))
            patch = keystatus.patch_for(obj, desired)
            if patch is None:
                continue
            meta = obj["metadata"]
            try:
                await asyncio.to_thread(self.kube.patch_status, f"{apikeys.GROUP}/{apikeys.VERSION}", apikeys.KIND,
                                        meta["namespace"], meta["name"], patch,
                                        resource_version=meta.get("resourceVersion"))
            except ApiException as exc:
                if exc.status == 404:
                    self.unwritten.pop(ident, None)
                elif exc.status != 409:  # 409: a newer copy is coming; the usage waits for it
                    self._write_log.failure(exc)
                continue
            self.unwritten.pop(ident, None)
            written += 1
        self._write_log.success()
        for ident in set(self.unwritten) - set(ids):  # usage of keys gone: nowhere to write it
            self.unwritten.pop(ident, None)
        return written
