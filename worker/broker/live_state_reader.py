"""Where a topic's live state is read, without ever loading the topic to learn it: the reads behind the
snapshot cache (``worker.broker.snapshot_cache``), ``purge-topic``, the scanner and the audit.

A topic some broker has loaded (``worker.broker.loaded_topics``) is asked of that broker (``internalStats``);
any other, and every 5.0 scalable topic's segment, is read from Pulsar's metadata store
(``worker.backends.pulsar_store``), safe even if a broker loads it meanwhile (docs/design.md, "A topic is
never loaded to learn what it uses"). A topic without a managed ledger there is gone only if the admin API's
namespace topic list agrees. Asking an owner found by a lookup loads the topic: only ``may_load`` does
(``purge-topic`` without a metadata store, about to delete the topic).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable

from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound
from worker.broker.loaded_topics import LoadedTopics
from worker.core.gone_proof import GoneUnconfirmed
from worker.core.live_set import LiveSet
from worker.core.metadata_stores import PulsarMetadataStore
from worker.errors import BackendError
from worker.formats.topic_name import TopicName


class NotLoadedUnreadable(BackendError):
    """No broker has the topic loaded and no metadata store is configured: its live state cannot be read
    without loading it."""

    def __init__(self, topic: TopicName) -> None:
        super().__init__(
            "admin",
            f"{topic} is not loaded on any broker, and without a metadata store (zookeeper.metadata_store_url) its "
            "live state cannot be read without loading it",
        )


class SegmentUnsettled(BackendError):
    """A scalable topic lists a segment whose managed ledger is not in the metadata store (being created,
    or its metadata just deleted): neither live nor gone yet. Transient."""

    def __init__(self, segment: TopicName) -> None:
        super().__init__(
            "admin", f"{segment}: its scalable topic lists it but the metadata store has no managed ledger for it"
        )


class LiveStateReader:
    """A topic's live state from the broker that has it loaded, else from Pulsar's metadata store."""

    def __init__(
        self,
        admin: PulsarAdmin,
        on_request: Callable[[str, str], None] | None = None,
        *,
        metadata: PulsarMetadataStore | None = None,
        loaded: LoadedTopics | None = None,
        listing_ttl_s: float = 0.0,
        may_load: bool = False,
        max_owners: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.admin = admin
        self.metadata = metadata
        self.loaded = loaded
        self.may_load = may_load
        self.max_owners = max_owners
        self.listing_ttl_s = listing_ttl_s
        self.clock = clock
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._listings: OrderedDict[str, tuple[float, frozenset[str] | None]] = OrderedDict()
        self._on_request = on_request or (lambda endpoint, outcome: None)

    def forget_owner(self, topic: TopicName) -> None:
        self._owners.pop(str(topic), None)
        if self.loaded is not None:
            self.loaded.forget(topic)

    async def partitions(self, topic: TopicName) -> int:
        try:
            n = await self.admin.partitions(topic)
        except Exception:
            self._on_request("partitions", "error")
            raise
        self._on_request("partitions", "ok")
        return n

    async def fetch(self, topic: TopicName) -> LiveSet | None:
        """The topic's live state, or None when the admin API says it does not exist (and, where it was
        read, the metadata store has no managed ledger for it). Raises NotOwner when the broker that listed
        it answers 307 (the caller bumps the epoch and retries later), GoneUnconfirmed when the two stores
        disagree, BackendError when nothing could be read."""
        if topic.is_segment:
            # No admin resource serves a segment's internalStats: its records are always what is read.
            if self.metadata is None:
                raise BackendError(
                    "zookeeper",
                    f"{topic}: a segment's live state is read from the metadata store (zookeeper.metadata_store_url)",
                )
            return await self._fetch_stored(self.metadata, topic)
        serving = await self.loaded.serving(topic) if self.loaded is not None else None
        if serving is not None:
            try:
                stats = await self.admin.internal_stats(topic, base=serving.url)
            except TopicNotFound:
                # Deleted since the broker listed it: what is left is in the metadata store, if anything.
                self._on_request("internal_stats", "not_found")
                self.forget_owner(topic)
            except NotOwner:
                self._on_request("internal_stats", "redirect")
                self.forget_owner(topic)
                raise
            except Exception:
                self._on_request("internal_stats", "error")
                raise
            else:
                self._on_request("internal_stats", "ok")
                return LiveSet.from_internal_stats(topic, stats, serving.url, -1, self.clock())
        if self.metadata is not None:
            return await self._fetch_stored(self.metadata, topic)
        if self.may_load:
            return await self._fetch_loading(topic)
        raise NotLoadedUnreadable(topic)

    async def _fetch_stored(self, metadata: PulsarMetadataStore, topic: TopicName) -> LiveSet | None:
        """The topic's records in the metadata store, or None when it has none and the admin API does not list
        it either: its namespace's topic list, or for a segment its scalable topic's layout (a segment listed
        there without its managed ledger is being created or deleted: SegmentUnsettled)."""
        stored = await metadata.stored_topic(topic)
        if stored is not None:
            self._on_request("stored", "ok")
            return LiveSet.from_stored(
                topic, stored.managed_ledger, stored.cursors, stored.schema_ledgers, -1, self.clock()
            )
        if topic.is_segment:
            if await self.segment_listed(topic):
                raise SegmentUnsettled(topic)
        elif await self._listed(topic):
            raise GoneUnconfirmed(topic, "the admin API lists it, but the metadata store has no managed ledger")
        self._on_request("stored", "not_found")
        return None

    async def segment_listed(self, segment: TopicName) -> bool:
        """Whether the scalable topic of ``segment`` lists it; False when that topic does not exist: the admin
        API's half of a segment's "gone" proof."""
        try:
            listed = await self.admin.scalable_segments(segment)
        except TopicNotFound:
            self._on_request("scalable_segments", "not_found")
            return False
        except Exception:
            self._on_request("scalable_segments", "error")
            raise
        self._on_request("scalable_segments", "ok")
        return segment.segment in listed

    async def _listed(self, topic: TopicName) -> bool:
        """Whether the admin API lists ``topic`` among its namespace's persistent topics (system topics
        included); False when the namespace does not exist. The broker reads that list from its metadata
        store: no bundle is assigned and nothing is loaded. Kept ``listing_ttl_s`` per namespace."""
        ns = topic.namespace_name
        cached = self._listings.get(ns)
        if cached is None or self.clock() - cached[0] > self.listing_ttl_s:
            try:
                names: frozenset[str] | None = frozenset(await self.admin.list_topics(ns, include_system=True))
                self._on_request("topics", "ok")
            except TopicNotFound:
                self._on_request("topics", "not_found")
                names = None
            except Exception:
                self._on_request("topics", "error")
                raise
            cached = (self.clock(), names)
            self._listings[ns] = cached
            self._listings.move_to_end(ns)
            while len(self._listings) > self.max_owners:
                self._listings.popitem(last=False)
        return cached[1] is not None and str(topic) in cached[1]

    async def _owner(self, topic: TopicName) -> str:
        key = str(topic)
        if key in self._owners:
            self._owners.move_to_end(key)
            return self._owners[key]
        url = await self.admin.lookup(topic)
        self._on_request("lookup", "ok")
        self._owners[key] = url
        while len(self._owners) > self.max_owners:
            self._owners.popitem(last=False)  # losing an owner costs one lookup, nothing else
        return url

    async def _fetch_loading(self, topic: TopicName) -> LiveSet | None:
        """The owner found by a lookup, then its ``internalStats``: loads the topic if it is not loaded."""
        for attempt in (1, 2):
            try:
                owner = await self._owner(topic)
            except TopicNotFound:
                # No namespace, or no topic where auto-creation is off: the lookup is the admin's answer.
                self._on_request("lookup", "not_found")
                return None
            except Exception:
                self._on_request("lookup", "error")
                raise
            try:
                stats = await self.admin.internal_stats(topic, base=owner)
                self._on_request("internal_stats", "ok")
                return LiveSet.from_internal_stats(topic, stats, owner, -1, self.clock())
            except TopicNotFound:
                self._on_request("internal_stats", "not_found")
                return None
            except NotOwner:
                self._on_request("internal_stats", "redirect")
                self.forget_owner(topic)
                if attempt == 2:
                    raise
            except Exception:
                self._on_request("internal_stats", "error")
                self.forget_owner(topic)
                raise
        raise AssertionError("unreachable")
