"""Both metadata stores, connected from their URLs (``zookeeper.metadata_store_url``, Pulsar's;
``zookeeper.metadata_service_uri``, BookKeeper's, by default Pulsar's under ``/ledgers``): the provider is
chosen by the URL's scheme, as Pulsar's ``MetadataStoreFactoryImpl`` chooses a ``MetadataStoreProvider``
(``urlScheme()``, ``create(...)``). One client per distinct store; each role its own object
(``worker.core.metadata_stores``). ``worker.broker.preflight`` proves each is where the config says. Only the
composition root (``worker.commands``, the daemon's wiring, the nightly jobs' entry points) opens them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Protocol

from worker.backends.bookkeeper_store import BookKeeperStore
from worker.backends.pulsar_store import PulsarStore
from worker.backends.zookeeper import ZooKeeperProvider
from worker.core.metadata_stores import KeyValueStore
from worker.errors import BackendError
from worker.formats.metadata_store_url import StoreUrl, parse_metadata_service_uri, parse_metadata_store_url
from worker.settings import ZooKeeperSettings

PULSAR_KEY = "zookeeper.metadata_store_url"
BOOKKEEPER_KEY = "zookeeper.metadata_service_uri"


class StoreClient(KeyValueStore, Protocol):
    async def start(self, timeout_s: float | None = None) -> None: ...

    async def close(self) -> None: ...


Create = Callable[[str, str, float], StoreClient]  # a provider's create(servers, chroot, timeout_s)
# Every provider, by its URL scheme (the settings refuse the other stores' by name).
PROVIDERS: dict[str, Create] = {ZooKeeperProvider.url_scheme: ZooKeeperProvider.create}


def provider(url: StoreUrl, key: str) -> Create:
    found = PROVIDERS.get(url.scheme)
    if found is None:
        raise ValueError(f"{key}: no metadata store provider for {url.scheme}: (known: {', '.join(PROVIDERS)})")
    return found


class Stores:
    """Pulsar's metadata store (``pulsar``) and BookKeeper's (``bookkeeper``), on one client when both are in
    one store (``kv``: Pulsar's). Use as ``async with Stores(url) as stores:`` (or ``start()``/``close()``)."""

    def __init__(
        self,
        metadata_store_url: str,
        metadata_service_uri: str | None = None,
        *,
        timeout_s: float = 10.0,
    ) -> None:
        pulsar_url = parse_metadata_store_url(metadata_store_url)
        bk_url = parse_metadata_service_uri(metadata_service_uri or f"metadata-store:{metadata_store_url}/ledgers")
        self.kv: StoreClient = provider(pulsar_url, PULSAR_KEY)(pulsar_url.servers, pulsar_url.root, timeout_s)
        self._bookkeeper_kv: StoreClient | None = None
        root = bk_url.root
        if (bk_url.scheme, bk_url.servers) == (pulsar_url.scheme, pulsar_url.servers) and root.startswith(
            pulsar_url.root + "/"
        ):
            root = root[len(pulsar_url.root) :]  # the same store, below Pulsar's chroot: one client
        else:
            self._bookkeeper_kv = provider(bk_url, BOOKKEEPER_KEY)(bk_url.servers, "", timeout_s)
        self.pulsar = PulsarStore(self.kv, key=PULSAR_KEY)
        self.bookkeeper = BookKeeperStore(
            self._bookkeeper_kv or self.kv,
            ledgers_root=root,
            key=BOOKKEEPER_KEY if metadata_service_uri else PULSAR_KEY,
        )

    @classmethod
    def from_settings(cls, zs: ZooKeeperSettings) -> Stores:
        if not zs.metadata_store_url:
            raise ValueError(f"{PULSAR_KEY} is not set")
        return cls(zs.metadata_store_url, zs.metadata_service_uri, timeout_s=zs.timeout_s)

    async def start(self, timeout_s: float | None = None) -> None:
        await self.kv.start(timeout_s)
        if self._bookkeeper_kv is not None:
            try:
                await self._bookkeeper_kv.start(timeout_s)
            except BaseException:
                await self.kv.close()
                raise

    async def close(self) -> None:
        await self.kv.close()
        if self._bookkeeper_kv is not None:
            await self._bookkeeper_kv.close()

    async def __aenter__(self) -> Stores:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


def bookkeeper_store(metadata_service_uri: str, *, timeout_s: float = 10.0) -> tuple[StoreClient, BookKeeperStore]:
    """BookKeeper's store alone (the ledger walk of Spark's executors and tools): its client, to start and
    close, and the role on it."""
    url = parse_metadata_service_uri(metadata_service_uri)
    kv = provider(url, BOOKKEEPER_KEY)(url.servers, "", timeout_s)
    return kv, BookKeeperStore(kv, ledgers_root=url.root, key=BOOKKEEPER_KEY)


@contextlib.asynccontextmanager
async def optional_stores(zs: ZooKeeperSettings, *, timeout_s: float | None = None) -> AsyncIterator[Stores | None]:
    """Connected clients of both metadata stores for the operator commands, or None when none is configured
    (empty ``zookeeper.metadata_store_url``): they then run with less certainty (gone topics cannot be
    confirmed). Prove the stores with ``worker.broker.preflight.prove_metadata_stores`` before using them."""
    if not zs.metadata_store_url:
        yield None
        return
    stores = Stores.from_settings(zs)
    try:
        await stores.start(timeout_s)
    except BackendError as e:
        raise ConnectionError(f"{e} (set {PULSAR_KEY} empty to run without a metadata store)") from e
    try:
        yield stores
    finally:
        await stores.close()
