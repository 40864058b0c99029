"""The two metadata stores' URLs, as Pulsar and BookKeeper spell them: which store, where, under which root.

Pulsar's ``metadataStoreUrl`` (``MetadataStoreFactoryImpl``): the provider is chosen by the prefix ``zk:``,
``oxia:``, ``etcd:``, ``rocksdb:``, ``memory:``; anything else is ZooKeeper's bare connect string
(``host:port[,host:port...][/chroot]``). BookKeeper's ``metadataServiceUri``: ``zk[+<ledger manager>]://``
``host:port[;host:port...]/ledgers``, or Pulsar's ``metadata-store:<metadataStoreUrl>/ledgers``
(``PulsarMetadataClientDriver``). Only ZooKeeper has a provider here; the other stores are refused by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OTHER_STORES = {"oxia": "Oxia", "etcd": "etcd", "rocksdb": "RocksDB", "memory": "an in-memory store"}


class UnsupportedMetadataStore(ValueError):
    """A URL of a store this worker has no provider for, or not a metadata store URL at all."""


@dataclass(frozen=True, slots=True)
class StoreUrl:
    """The provider's scheme, its servers (``host:port`` joined by commas) and its root: the chroot of Pulsar's
    store ("" for none), or BookKeeper's ledgers root."""

    scheme: str
    servers: str
    root: str


def _check(url: str, scheme: str, ensemble: str, path: str) -> StoreUrl:
    if (name := OTHER_STORES.get(scheme.split("+")[0].removeprefix("local-"))) is not None:
        raise UnsupportedMetadataStore(f"{url!r} is {name} ({scheme}:): this worker has a ZooKeeper provider only")
    entries = [e.strip() for e in ensemble.replace(";", ",").split(",")]
    for entry in entries:
        host, _, port = entry.rpartition(":") if ":" in entry else (entry, "", "0")
        if not host or any(c.isspace() or c in "/@" for c in host) or not (port.isdigit() and int(port) < 65536):
            raise UnsupportedMetadataStore(f"{url!r}: {entry!r} is not a host[:port] (or has no valid port)")
    if path and (path.endswith("/") or "//" in path or any(c.isspace() for c in path)):
        raise UnsupportedMetadataStore(f"{url!r}: {path!r} must be a path like /pulsar (no trailing or double slash)")
    return StoreUrl("zk", ",".join(entries), path)


def parse_metadata_store_url(url: str) -> StoreUrl:
    """Pulsar's ``metadataStoreUrl`` (``metadata-store:`` before it tolerated, as BookKeeper's URI spells it)."""
    rest, scheme = url.strip().removeprefix("metadata-store:"), "zk"
    if rest.startswith("zk:"):
        rest = rest[3:]
    elif m := re.match(r"([a-z][a-z0-9+.-]*):(?!\d)", rest):  # a scheme, not a host:port
        scheme, rest = m.group(1), rest[m.end() :]
        if scheme.removeprefix("local-") not in OTHER_STORES:
            raise UnsupportedMetadataStore(f"{url!r}: unknown metadata store scheme {scheme}: (zk: is known)")
    ensemble, slash, chroot = rest.removeprefix("//").partition("/")
    return _check(url, scheme, ensemble, slash + chroot)


def parse_metadata_service_uri(uri: str) -> StoreUrl:
    """BookKeeper's ``metadataServiceUri``. The ledger manager the scheme names is not needed: the store's
    ``LAYOUT`` says which one wrote it."""
    v = uri.strip()
    if v.startswith("metadata-store:"):
        store = parse_metadata_store_url(v)
    else:
        scheme, sep, rest = v.partition("://")
        if not sep:
            raise UnsupportedMetadataStore(f"{uri!r}: write the bookies' metadataServiceUri (zk+hierarchical://...)")
        if not re.fullmatch(r"zk(\+(hierarchical|longhierarchical|flat|legacyhierarchical|null))?", scheme):
            _check(uri, scheme, "h", "")  # another store's scheme is refused by name
            raise UnsupportedMetadataStore(f"{uri!r}: unknown metadata service scheme {scheme}:// (zk+hierarchical://)")
        ensemble, slash, path = rest.partition("/")
        store = _check(uri, "zk", ensemble, slash + path)
    if not store.root:
        raise UnsupportedMetadataStore(f"{uri!r}: no ledgers root (the path after the hosts, e.g. /ledgers)")
    return store
