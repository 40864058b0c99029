"""Who owns a topic (lookup, cached per topic, bounded, dropped on a 307 or an error) and what the owner
says it references (``internalStats`` asked of that owner only), and whether a scalable topic still lists
a segment: the admin API's reads behind the snapshot cache."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound
from worker.formats.topic_name import TopicName


class LiveStateReader:
    """Owner lookup (cached per topic, bounded, dropped on 307 or error) + ``internalStats`` on the owner."""

    def __init__(
        self, admin: PulsarAdmin, on_request: Callable[[str, str], None] | None = None, *, max_owners: int = 100_000
    ) -> None:
        self.admin = admin
        self.max_owners = max_owners
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._on_request = on_request or (lambda endpoint, outcome: None)

    def forget_owner(self, topic: TopicName) -> None:
        self._owners.pop(str(topic), None)

    async def partitions(self, topic: TopicName) -> int:
        try:
            n = await self.admin.partitions(topic)
        except Exception:
            self._on_request("partitions", "error")
            raise
        self._on_request("partitions", "ok")
        return n

    async def owner(self, topic: TopicName) -> str:
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

    async def segment_listed(self, segment: TopicName) -> bool:
        """Whether the scalable topic of ``segment`` (Pulsar 5.0) lists it; False when that topic does not
        exist: the admin API's half of a segment's "gone" proof."""
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

    async def fetch(self, topic: TopicName) -> tuple[dict[str, Any], str] | None:
        """(internalStats, owner url), or None when the admin API says the topic does not exist (a lookup
        or internalStats "not found" in Pulsar's words). Raises NotOwner after a second redirect so the
        caller can bump the epoch and retry later."""
        for attempt in (1, 2):
            try:
                owner = await self.owner(topic)
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
                return stats, owner
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
