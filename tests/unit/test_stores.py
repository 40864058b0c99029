"""The one store seam (``worker.backends.stores``): the provider is chosen by the scheme of each store's URL,
as Pulsar's ``MetadataStoreFactoryImpl`` chooses a ``MetadataStoreProvider``; both roles are written once over
the provider's key-value store. No server: nothing here connects."""

from __future__ import annotations

import pytest

from worker.backends.bookkeeper_store import BookKeeperStore
from worker.backends.pulsar_store import PulsarStore
from worker.backends.stores import PROVIDERS, Stores, bookkeeper_store, provider
from worker.backends.zookeeper import ZooKeeperProvider, ZooKeeperStore
from worker.formats.metadata_store_url import StoreUrl, UnsupportedMetadataStore
from worker.settings import load_settings


def test_zookeeper_is_the_provider_of_the_zk_scheme() -> None:
    assert PROVIDERS == {"zk": ZooKeeperProvider.create}
    assert provider(StoreUrl("zk", "zk-1:2181", ""), "k") is ZooKeeperProvider.create


def test_a_scheme_without_a_provider_is_refused_naming_the_key() -> None:
    with pytest.raises(ValueError, match=r"zookeeper\.metadata_store_url: no metadata store provider for oxia:"):
        provider(StoreUrl("oxia", "oxia:6648", ""), "zookeeper.metadata_store_url")


@pytest.mark.parametrize(
    ("url", "uri", "pulsar", "bookkeeper", "root", "one_client"),
    [
        # BookKeeper's store defaults to Pulsar's under /ledgers, on the same client (below its chroot).
        ("zk:zk-1:2181", None, "zk-1:2181", "zk-1:2181", "/ledgers", True),
        ("zk:zk-1:2181/pulsar", None, "zk-1:2181/pulsar", "zk-1:2181/pulsar", "/ledgers", True),
        ("zk-1:2181", "zk+hierarchical://zk-1:2181/ledgers", "zk-1:2181", "zk-1:2181", "/ledgers", True),
        (
            "metadata-store:zk:zk-1:2181",
            "metadata-store:zk:zk-1:2181/ledgers",
            "zk-1:2181",
            "zk-1:2181",
            "/ledgers",
            True,
        ),
        # Another ensemble, or a root outside Pulsar's chroot: a client of its own.
        ("zk:zk-1:2181", "zk://bk-1:2181;bk-2:2181/ledgers", "zk-1:2181", "bk-1:2181,bk-2:2181", "/ledgers", False),
        (
            "zk:zk-1:2181/pulsar",
            "zk+hierarchical://zk-1:2181/ledgers",
            "zk-1:2181/pulsar",
            "zk-1:2181",
            "/ledgers",
            False,
        ),
    ],
)
def test_stores_chosen_by_url(
    url: str, uri: str | None, pulsar: str, bookkeeper: str, root: str, one_client: bool
) -> None:
    stores = Stores(url, uri)
    assert isinstance(stores.kv, ZooKeeperStore) and stores.kv.hosts == pulsar
    assert isinstance(stores.pulsar, PulsarStore) and stores.pulsar.kv is stores.kv
    assert isinstance(stores.bookkeeper, BookKeeperStore) and stores.bookkeeper.ledgers_root == root
    assert (stores.bookkeeper.kv is stores.kv) == one_client
    assert isinstance(stores.bookkeeper.kv, ZooKeeperStore) and stores.bookkeeper.kv.hosts == bookkeeper
    assert stores.pulsar.where == f"zookeeper.metadata_store_url {pulsar}"
    key = "zookeeper.metadata_service_uri" if uri else "zookeeper.metadata_store_url"
    assert stores.bookkeeper.where == f"{key} {bookkeeper} at ledgers root {root}"


def test_stores_from_settings() -> None:
    settings = load_settings(
        zookeeper={"metadata_store_url": "zk:zk-1:2181", "metadata_service_uri": "zk://bk-1:2181/bk/ledgers"}
    )
    stores = Stores.from_settings(settings.zookeeper)
    assert stores.bookkeeper.ledgers_root == "/bk/ledgers" and stores.bookkeeper.kv is not stores.kv
    with pytest.raises(ValueError, match=r"zookeeper\.metadata_store_url is not set"):
        Stores.from_settings(load_settings(zookeeper={"metadata_store_url": ""}).zookeeper)


@pytest.mark.parametrize("url", ["oxia://oxia:6648/default", "etcd:http://etcd:2379", "metadata-store:oxia://o:1"])
def test_other_stores_are_refused_by_name(url: str) -> None:
    with pytest.raises(UnsupportedMetadataStore, match="this worker has a ZooKeeper provider only"):
        Stores(url)
    with pytest.raises(UnsupportedMetadataStore, match="this worker has a ZooKeeper provider only"):
        Stores("zk:zk-1:2181", url if "://" in url and not url.startswith("etcd:h") else "etcd://e:2379/ledgers")


def test_bookkeepers_store_alone() -> None:
    kv, store = bookkeeper_store("zk+hierarchical://bk-1:2181;bk-2:2181/ledgers")
    assert isinstance(kv, ZooKeeperStore) and kv.hosts == "bk-1:2181,bk-2:2181"
    assert store.kv is kv and store.ledgers_root == "/ledgers"
