"""Which broker has a topic loaded, learned without loading anything: each live broker's own
``broker-stats/topics`` list, kept for ``ttl_s``, and a topic counts as loaded there only while that broker
still owns its bundle (its ownership znode, read right before). A list may miss a topic loaded since
(harmless: the stored read is safe for a loaded topic too) or name one unloaded since (bounded by the
ownership check). Without the lists (not a superuser) every topic is read from the metadata store.
docs/design.md, "A topic is never loaded to learn what it uses".
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound
from worker.core.metadata_stores import PulsarMetadataStore
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
        metadata: PulsarMetadataStore | None,
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
