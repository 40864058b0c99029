"""What a namespace looks like to Pulsar, for tests that must prove a command changed nothing.

A topic that gets loaded leaves marks everywhere: its bundle gets an owner (an ownership znode), the
broker recovers its last ledger and creates a new one (a new ledger in BookKeeper, the managed-ledger
znode rewritten), its cursors are recovered (cursor znodes rewritten on the next close), and the broker
lists it among the topics it serves. A :class:`Footprint` holds each of those for one namespace.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from worker.backends.ledger_listing import ledger_subtrees, read_subtrees
from worker.broker.admin import PulsarAdmin
from worker.core.ledger_owner import Unmapped, owner_of
from worker.formats.ledger_metadata import parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError


@dataclass(frozen=True)
class Footprint:
    ledgers: frozenset[int]  # every BookKeeper ledger whose metadata names a topic of the namespace
    znodes: dict[str, tuple[int, int]]  # managed-ledger and cursor znode path -> (version, mtime)
    bundle_owners: dict[str, bytes]  # bundle range -> its ownership znode's content
    loaded: frozenset[str]  # the namespace's topics the brokers list as loaded

    def differences(self, other: Footprint) -> dict[str, object]:
        out: dict[str, object] = {}
        if self.ledgers != other.ledgers:
            out["ledgers"] = {"new": sorted(other.ledgers - self.ledgers), "gone": sorted(self.ledgers - other.ledgers)}
        changed = {p for p in self.znodes.keys() | other.znodes.keys() if self.znodes.get(p) != other.znodes.get(p)}
        if changed:
            out["znodes"] = {p: (self.znodes.get(p), other.znodes.get(p)) for p in sorted(changed)}
        if self.bundle_owners != other.bundle_owners:
            out["bundle_owners"] = (self.bundle_owners, other.bundle_owners)
        if self.loaded != other.loaded:
            out["loaded"] = {"new": sorted(other.loaded - self.loaded), "gone": sorted(self.loaded - other.loaded)}
        return out


def _ledgers_of(zk_hosts: str, ledgers_root: str, namespace: str) -> frozenset[int]:
    out = set()
    uri = f"zk://{zk_hosts.replace(',', ';')}{ledgers_root}"
    for lid, data, ctime in read_subtrees(uri, ledger_subtrees(uri)):
        try:
            owner = owner_of(parse_serialized_metadata(lid, data, ctime).custom_metadata)
        except (MetadataFormatError, Unmapped):
            continue
        if owner is not None and owner.topic.namespace_name == namespace:
            out.add(lid)
    return frozenset(out)


def _znodes(zk_hosts: str, namespace: str) -> tuple[dict[str, tuple[int, int]], dict[str, bytes]]:
    zk = KazooClient(hosts=zk_hosts, timeout=30)
    zk.start(30)
    try:
        znodes: dict[str, tuple[int, int]] = {}
        root = f"/managed-ledgers/{namespace}/persistent"
        try:
            topics = zk.get_children(root)
        except NoNodeError:
            topics = []
        for t in topics:
            for path in [f"{root}/{t}", *(f"{root}/{t}/{c}" for c in zk.get_children(f"{root}/{t}"))]:
                try:
                    stat = zk.exists(path)
                except NoNodeError:
                    continue
                if stat is not None:
                    znodes[path] = (stat.version, stat.mtime)
        owners: dict[str, bytes] = {}
        try:
            bundles = zk.get_children(f"/namespace/{namespace}")
        except NoNodeError:
            bundles = []
        for b in bundles:
            try:
                owners[b] = zk.get(f"/namespace/{namespace}/{b}")[0]
            except NoNodeError:
                continue
        return znodes, owners
    finally:
        zk.stop()
        zk.close()


async def footprint(admin: PulsarAdmin, zk_hosts: str, namespace: str, ledgers_root: str = "/ledgers") -> Footprint:
    """The namespace's footprint now. ``loaded`` comes from every live broker's own list, which a broker
    refreshes every ``statsUpdateFrequencyInSecs``: read it again after that long to see a load."""
    ledgers = await asyncio.to_thread(_ledgers_of, zk_hosts, ledgers_root, namespace)
    znodes, owners = await asyncio.to_thread(_znodes, zk_hosts, namespace)
    loaded: set[str] = set()
    for broker in await admin.active_brokers():
        scheme = "https" if admin.admin_url.startswith("https://") else "http"
        listed = await admin.at(f"{scheme}://{broker}").loaded_topics()
        loaded |= {t for t, (ns, _) in listed.items() if ns == namespace}
    return Footprint(ledgers, znodes, owners, frozenset(loaded))


async def stats_period_s(admin: PulsarAdmin) -> float:
    """How often a broker refreshes its list of loaded topics (``statsUpdateFrequencyInSecs``)."""
    conf = await admin.broker_runtime_config()
    return float(conf.get("statsUpdateFrequencyInSecs", 60))


async def listed_as_loaded(admin: PulsarAdmin, topics: Iterable[str], timeout: float = 150) -> None:
    """Waits until the brokers' own lists name every one of ``topics`` as loaded: a topic is asked of its broker
    (``internalStats``, the owner route) only once a list names it, up to ``statsUpdateFrequencyInSecs`` after
    its load; before that its live state is read from the metadata store."""
    wanted = set(topics)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        loaded: set[str] = set()
        for broker in await admin.active_brokers():
            scheme = "https" if admin.admin_url.startswith("https://") else "http"
            loaded |= set(await admin.at(f"{scheme}://{broker}").loaded_topics())
        if wanted <= loaded:
            return
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not listed as loaded after {timeout} s: {sorted(wanted - loaded)}")
        await asyncio.sleep(2)
