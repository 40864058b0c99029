"""zookeeper.hosts (Pulsar's metadata store) and zookeeper.bookkeeper_hosts (BookKeeper's), checked at load."""

from __future__ import annotations

import pytest

from worker.settings import ConfigError, load_settings


def test_bookkeeper_store_defaults_to_pulsars() -> None:
    zs = load_settings(zookeeper={"hosts": "zk-1:2181,zk-2:2181/pulsar"}).zookeeper
    assert zs.bookkeeper_hosts is None
    assert zs.bookkeeper_store == "zk-1:2181,zk-2:2181/pulsar"
    assert zs.bookkeeper_store_key == "zookeeper.hosts"


def test_stores_apart() -> None:
    zs = load_settings(
        zookeeper={"hosts": "zk:2181", "bookkeeper_hosts": "bk-zk:2181", "ledgers_root": "/ledgers/"}
    ).zookeeper
    assert (zs.bookkeeper_store, zs.bookkeeper_store_key, zs.ledgers_root) == (
        "bk-zk:2181",
        "zookeeper.bookkeeper_hosts",
        "/ledgers",
    )


def test_no_zookeeper_at_all_still_loads() -> None:
    zs = load_settings(zookeeper={"hosts": ""}).zookeeper
    assert zs.hosts is None and zs.bookkeeper_store is None


def test_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LDW_ZOOKEEPER__BOOKKEEPER_HOSTS", "bk-zk:2181/bk")
    assert load_settings().zookeeper.bookkeeper_store == "bk-zk:2181/bk"


@pytest.mark.parametrize(
    ("zookeeper", "key"),
    [
        ({"hosts": "zk:127.0.0.1:2181"}, "zookeeper.hosts"),  # Pulsar's metadataStoreUrl pasted as is
        ({"bookkeeper_hosts": "zk+hierarchical://bk:2181/ledgers"}, "zookeeper.bookkeeper_hosts"),
        ({"hosts": "zk:21x1"}, "zookeeper.hosts"),
        ({"bookkeeper_hosts": "bk:2181/ledgers/"}, "zookeeper.bookkeeper_hosts"),
        ({"hosts": "a:2181,,b:2181"}, "zookeeper.hosts"),
        ({"ledgers_root": "ledgers"}, "zookeeper.ledgers_root"),
        (
            {"hosts": None, "bookkeeper_hosts": "bk:2181"},
            "zookeeper.bookkeeper_hosts is set but zookeeper.hosts is empty",
        ),
    ],
)
def test_a_bad_value_names_its_key(zookeeper: dict[str, str | None], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_settings(zookeeper=zookeeper)
