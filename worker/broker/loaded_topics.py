"""Which broker has a topic loaded, learned without loading anything.

No admin read of a persistent topic answers "not loaded" on Pulsar 4.0.8: each one loads the topic first
(``BrokerService.getTopicIfExists``), and a lookup of a bundle nobody owns assigns it to a broker. What
does not load anything is each broker's own list of the topics it serves, ``broker-stats/topics``. So the
lists of every live broker are read (brokers from Pulsar's metadata store, else the admin API's
``brokers``), kept for ``ttl_s``, and a topic is taken to be loaded where a list names it, and only if that
broker still owns the topic's bundle (its ownership znode, read right before: a bundle unloaded since would
otherwise be assigned again by the very read that follows).

A broker refreshes its list every ``statsUpdateFrequencyInSecs`` (60 s by default), so a list may miss a
topic loaded since, and still name one unloaded since. The first is harmless: that topic's live state is
read from the metadata store, which is safe for a loaded topic too (``worker.core.live_set``). The second is
bounded by the ownership check to a topic unloaded on its own while its bundle stays (``topics unload``):
its owner reloads it when asked. Without the lists (a role that is not a superuser may not read them) every
topic counts as not loaded and is read from the metadata store.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from worker.backends.pulsar_metadata import PulsarMetadata
from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound
from worker.errors import BackendError
from worker.formats.topic_name import TopicName
from worker.logs import get_logger

log = get_logger(component="loaded_topics")


@dataclass(frozen=True, slots=True)
class Serving:
    """A broker that lists ``topic`` as loaded, and the bundle it lists it under."""

    url: str
    namespace: str
    bundle: str


class LoadedTopics:
    """The brokers' lists of loaded topics, read at most every ``ttl_s`` (one read at a time)."""

    def __init__(
        self,
        admin: PulsarAdmin,
        metadata: PulsarMetadata | None,
        *,
        ttl_s: float,
        clock: Callable[[], float] = time.monotonic,
        on_request: Callable[[str, str], None] | None = None,
    ) -> None:
        self.admin = admin
        self.metadata = metadata
        self.ttl_s = ttl_s
        self.clock = clock
        self._on_request = on_request or (lambda endpoint, outcome: None)
        self._tls = admin.admin_url.startswith("https://")
        self._serving: dict[str, Serving] = {}
        self._read_at: float | None = None
        self._lock = asyncio.Lock()
        # Why the lists could not be read (None: they were, or were not asked yet).
        self.unreadable: str | None = None

    async def serving(self, topic: TopicName) -> Serving | None:
        """The broker that has ``topic`` loaded and still owns its bundle, or None: no broker lists it
        (or the lists are not readable), so its live state is read from the metadata store."""
        await self._fresh()
        s = self._serving.get(str(topic))
        if s is None or self.metadata is None:
            return s
        owner = await self.metadata.bundle_owner(s.namespace, s.bundle)
        if owner is None or s.url not in (owner.http, owner.https):
            return None
        return s

    def forget(self, topic: TopicName) -> None:
        """The broker listing ``topic`` no longer serves it (a 307, a 404): not loaded until a list says so."""
        self._serving.pop(str(topic), None)

    async def _fresh(self) -> None:
        if self._read_at is not None and self.clock() - self._read_at < self.ttl_s:
            return
        async with self._lock:
            if self._read_at is not None and self.clock() - self._read_at < self.ttl_s:
                return
            was_unreadable = self.unreadable
            self._serving, self.unreadable = await self._read()
            self._read_at = self.clock()
            if self.unreadable is not None and was_unreadable is None:
                log.warning("every topic's live state is read from the metadata store", reason=self.unreadable)

    async def _read(self) -> tuple[dict[str, Serving], str | None]:
        try:
            urls = await self._broker_urls()
            lists = await asyncio.gather(*(self.admin.at(url).loaded_topics() for url in urls))
        except (BackendError, NotOwner, TopicNotFound) as e:
            self._on_request("broker_topics", "error")
            if isinstance(e, BackendError) and e.status in (401, 403):
                return {}, f"the brokers' lists of loaded topics are not readable with this role ({e})"
            raise
        self._on_request("broker_topics", "ok")
        serving: dict[str, Serving] = {}
        for url, listed in zip(urls, lists, strict=True):
            for topic, (namespace, bundle) in listed.items():
                serving[topic] = Serving(url, namespace, bundle)
        return serving, None

    async def _broker_urls(self) -> list[str]:
        if self.metadata is not None:
            urls = [u for b in await self.metadata.brokers() if (u := b.url(self._tls)) is not None]
            if urls:
                return urls
        scheme = "https" if self._tls else "http"
        return [f"{scheme}://{b}" for b in await self.admin.active_brokers()]
