"""Both metadata stores on ZooKeeper, connected from the settings.

Two stores, which may be two ensembles (a supported Pulsar layout): Pulsar's metadata store
(``zookeeper.hosts``: managed ledgers, cursors, schemas) and BookKeeper's (``zookeeper.bookkeeper_hosts``,
by default the same: the ledgers root with ledger metadata and registered bookies). One kazoo session per
distinct ensemble; each store is its own object of its own type (``worker.core.metadata_stores``), so a
managed-ledger read can only go to Pulsar's and a ledger read or delete only to BookKeeper's. Neither is
trusted blindly: ``worker.broker.preflight`` proves at start that each is where the config says.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from types import TracebackType

from worker.backends.bookkeeper_store import ZooKeeperBookKeeperStore
from worker.backends.pulsar_store import ZooKeeperPulsarStore
from worker.backends.zookeeper_session import ZooKeeperSession
from worker.errors import BackendError
from worker.settings import ZooKeeperSettings


class ZooKeeper:
    """Pulsar's metadata store (``pulsar``, on ``hosts``) and BookKeeper's (``bookkeeper``, on
    ``bookkeeper_hosts``; default: the same session). Use as ``async with ZooKeeper(hosts) as zk:`` (or
    ``start()``/``close()``). ``session`` is Pulsar's ensemble's, for the readers of Pulsar's records that
    are not topics' (brokers, bundle owners) and for tools."""

    def __init__(
        self,
        hosts: str,
        *,
        timeout_s: float = 10.0,
        ledgers_root: str = "/ledgers",
        bookkeeper_hosts: str | None = None,
        pulsar_key: str = "zookeeper.hosts",
        bookkeeper_key: str | None = None,
    ) -> None:
        self.session = ZooKeeperSession(hosts, timeout_s=timeout_s)
        separate = bool(bookkeeper_hosts) and bookkeeper_hosts != hosts
        self._bookkeeper_session = (
            ZooKeeperSession(bookkeeper_hosts, timeout_s=timeout_s) if separate and bookkeeper_hosts else None
        )
        self.pulsar = ZooKeeperPulsarStore(self.session, key=pulsar_key)
        self.bookkeeper = ZooKeeperBookKeeperStore(
            self._bookkeeper_session or self.session,
            ledgers_root=ledgers_root,
            # The key that names BookKeeper's store in error messages.
            key=bookkeeper_key or ("zookeeper.bookkeeper_hosts" if separate else pulsar_key),
        )

    @classmethod
    def from_settings(cls, zs: ZooKeeperSettings) -> ZooKeeper:
        if not zs.hosts:
            raise ValueError("zookeeper.hosts is not set")
        return cls(
            zs.hosts,
            timeout_s=zs.timeout_s,
            ledgers_root=zs.ledgers_root,
            bookkeeper_hosts=zs.bookkeeper_hosts,
            pulsar_key=zs.pulsar_store_key,
            bookkeeper_key=zs.bookkeeper_store_key,
        )

    @property
    def hosts(self) -> str:
        return self.session.hosts

    async def start(self) -> None:
        await self.session.start()
        if self._bookkeeper_session is not None:
            try:
                await self._bookkeeper_session.start()
            except BaseException:
                await self.session.close()
                raise

    async def close(self) -> None:
        await self.session.close()
        if self._bookkeeper_session is not None:
            await self._bookkeeper_session.close()

    async def __aenter__(self) -> ZooKeeper:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()


@contextlib.asynccontextmanager
async def optional_zookeeper(zs: ZooKeeperSettings) -> AsyncIterator[ZooKeeper | None]:
    """Connected clients of both metadata stores for the operator commands, or None when no ZooKeeper is
    configured (empty ``zookeeper.hosts``): they then run with less certainty (gone topics cannot be
    confirmed). Prove the stores with ``worker.broker.preflight.prove_metadata_stores`` before using them."""
    if not zs.hosts:
        yield None
        return
    zk = ZooKeeper.from_settings(zs)
    try:
        await zk.start()
    except BackendError as e:
        raise ConnectionError(f"{e} (set zookeeper.hosts empty to run without ZooKeeper)") from e
    try:
        yield zk
    finally:
        await zk.close()
