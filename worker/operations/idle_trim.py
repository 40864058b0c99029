"""``trim-idle``'s work: find the topics no broker has loaded whose ledgers are past their retention, and ask
the broker to trim them (docs/cli.md, "``trim-idle``: reclaim what nothing trims").

Finding loads nothing: topics a broker lists as loaded are left to it; every other is read from the metadata
store (``worker.backends.pulsar_store``) and run through the broker's trim rule (``worker.core.retention``)
with its effective retention and message TTL (topic policy from ``__change_events`` when readable, else
namespace, else broker default), and what a load would let its TTL expire (``worker.core.ttl_expiry``).
Trimming (``--apply``) is Pulsar's admin ``trim``, which loads the topic and lets the broker decide what goes;
rate- and concurrency-bounded, resumable through a state file, and holding back a topic whose load may
expire unacknowledged backlog unless ``allow_ttl_expiry``.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound, open_admin
from worker.broker.client import blocking_client
from worker.broker.loaded_topics import LoadedTopics
from worker.broker.topic_policies import NamespaceTopicPolicies, TopicPolicies
from worker.core.metadata_stores import BookKeeperMetadataStore, MetadataStores, PulsarMetadataStore, StoredTopic
from worker.core.retention import EffectiveRetention, PastRetention, Retention, effective_retention, past_retention
from worker.core.ttl_expiry import (
    COMPACTION_CURSOR,
    LedgerRecord,
    MessageTtl,
    TtlExpiry,
    any_ttl_expiry,
    effective_ttl,
    ttl_expiry,
)
from worker.daemon.rate_limit import TokenBucket
from worker.errors import BackendError
from worker.formats.ledger_metadata import parse_serialized_metadata
from worker.formats.metadata_paths import UnsupportedLedgerLayout
from worker.formats.protobuf_wire import MetadataFormatError
from worker.formats.topic_name import TopicName
from worker.logs import get_logger
from worker.settings import Settings

log = get_logger(component="idle_trim")


@dataclass(frozen=True, slots=True)
class IdleTopic:
    """A topic no broker has loaded, with the ledgers its broker would trim."""

    topic: TopicName
    retention: EffectiveRetention
    # Why its own (topic-level) retention is not known, None when it was read.
    topic_policy_unread: str | None
    ledgers: int
    size: int
    past: PastRetention
    # Its effective message TTL, and what a load would let it expire (computed for a topic with ledgers past
    # retention: the ones --apply loads).
    ttl: MessageTtl = field(default_factory=lambda: MessageTtl(0, "broker"))
    expiry: TtlExpiry = field(default_factory=lambda: TtlExpiry(MessageTtl(0, "broker")))
    # Why --apply holds it back (a load may expire unacknowledged backlog), None when it does not.
    ttl_risk: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": str(self.topic),
            "retention": self.retention.retention.to_dict(),
            "retention_from": self.retention.source,
            "topic_policy_unread": self.topic_policy_unread,
            "ledgers": self.ledgers,
            "bytes": self.size,
            "past_retention": [
                {"ledger_id": ld.ledger_id, "entries": ld.entries, "bytes": ld.size, "timestamp": ld.timestamp}
                for ld in self.past.ledgers
            ],
            "past_retention_bytes": self.past.size,
            "kept_because": self.past.kept_because,
            "message_ttl": self.ttl.to_dict(),
            "ttl_expiry": self.expiry.to_dict(),
            "ttl_risk": self.ttl_risk,
        }


@dataclass
class FindReport:
    """What the dry run found: the idle topics with ledgers past retention, and the counts of the others."""

    broker_default: Retention
    broker_default_ttl: int = 0
    past: list[IdleTopic] = field(default_factory=list)
    read: int = 0  # idle topics read from the metadata store
    loaded: list[str] = field(default_factory=list)  # topics a broker has loaded: its own trims cover them
    within: list[IdleTopic] = field(default_factory=list)  # idle topics with nothing past retention
    skipped: list[dict[str, str]] = field(default_factory=list)
    unread_policies: dict[str, str] = field(default_factory=dict)  # namespace -> why

    @property
    def ledgers(self) -> int:
        return sum(len(t.past.ledgers) for t in self.past)

    @property
    def size(self) -> int:
        return sum(t.past.size for t in self.past)

    @property
    def ttl_risk(self) -> list[IdleTopic]:
        """The topics found whose load may let their message TTL expire unacknowledged backlog."""
        return [t for t in self.past if t.ttl_risk is not None]

    def to_dict(self) -> dict[str, Any]:
        return {
            "broker_default_retention": self.broker_default.to_dict(),
            "broker_default_message_ttl_seconds": self.broker_default_ttl,
            "topics": [t.to_dict() for t in self.past],
            "past_retention_topics": len(self.past),
            "past_retention_ledgers": self.ledgers,
            "past_retention_bytes": self.size,
            "idle_topics_read": self.read,
            "within_retention": [
                {
                    "topic": str(t.topic),
                    "retention_from": t.retention.source,
                    "retention": t.retention.retention.to_dict(),
                    "kept_because": t.past.kept_because,
                }
                for t in self.within
            ],
            "loaded": sorted(self.loaded),
            "skipped": self.skipped,
            "topic_policies_unread": self.unread_policies,
            "ttl_risk": [{"topic": str(t.topic), "why": t.ttl_risk} for t in self.ttl_risk],
        }


class IdleTrimFinder:
    def __init__(
        self,
        metadata: PulsarMetadataStore,
        loaded: LoadedTopics,
        topic_policies: TopicPolicies | None,
        *,
        broker_default: Retention,
        broker_default_ttl: int = 0,
        ledgers: BookKeeperMetadataStore | None = None,
        namespaces: Sequence[str] = (),
        concurrency: int = 16,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        progress: Callable[[str, int, int], None] | None = None,
    ) -> None:
        self.metadata = metadata
        self.loaded = loaded
        self.topic_policies = topic_policies
        self.broker_default = broker_default
        self.broker_default_ttl = broker_default_ttl
        # BookKeeper's store, for the records of a topic's first and last ledgers (None: not known).
        self.ledgers = ledgers
        self.namespaces = list(namespaces)
        self.concurrency = concurrency
        self.now_ms = now_ms
        self.progress = progress or (lambda phase, done, total: None)
        self._namespace_policies: dict[str, asyncio.Task[dict[str, Any]]] = {}

    async def find(self) -> FindReport:
        report = FindReport(self.broker_default, self.broker_default_ttl)
        topics = [t async for t in self.topics()]
        todo = iter(topics)
        done = 0

        # A fixed number of readers pulling from one list: no task per topic on a cluster of many.
        async def reader() -> None:
            nonlocal done
            for topic in todo:
                try:
                    await self._one(topic, report)
                except (BackendError, NotOwner, TopicNotFound) as e:
                    report.skipped.append({"topic": str(topic), "why": f"{type(e).__name__}: {e}"})
                done += 1
                self.progress("read", done, len(topics))

        await asyncio.gather(*(reader() for _ in range(self.concurrency)))
        report.past.sort(key=lambda t: str(t.topic))
        report.within.sort(key=lambda t: str(t.topic))
        report.skipped.sort(key=lambda s: s["topic"])
        return report

    async def _one(self, topic: TopicName, report: FindReport) -> None:
        if await self.loaded.serving(topic) is not None:
            report.loaded.append(str(topic))
            return
        stored = await self.metadata.stored_topic(topic)
        if stored is None:
            return  # deleted since the listing
        report.read += 1
        idle = await self.judge(stored, report)
        if idle.past.ledgers:
            report.past.append(idle)
        else:
            report.within.append(idle)

    async def judge(self, stored: StoredTopic, report: FindReport | None = None) -> IdleTopic:
        """The topic's effective retention and its ledgers past it (``worker.core.retention``); for a topic with
        some, its effective message TTL and what a load would let it expire (``worker.core.ttl_expiry``)."""
        topic = stored.topic
        ns = topic.namespace_name
        own: NamespaceTopicPolicies | None = None
        if self.topic_policies is not None:
            own = await self.topic_policies.of(ns)
        unread = "topic policies not asked for" if own is None else own.unread
        if unread is not None and report is not None:
            report.unread_policies[ns] = unread
        retention = effective_retention(
            own.retention(topic) if own is not None else None, await self.namespace_retention(ns), self.broker_default
        )
        ttl = effective_ttl(
            own.message_ttl(topic) if own is not None else None, await self.namespace_ttl(ns), self.broker_default_ttl
        )
        ml = stored.managed_ledger
        now = self.now_ms()
        past = past_retention(ml, stored.cursors, retention.retention, now)
        expiry, risk = TtlExpiry(ttl), None
        if past.ledgers:  # what --apply loads
            expiry, risk = await self._ttl_risk(stored, ttl, unread, now)
        return IdleTopic(
            topic, retention, unread, len(ml.ledgers), sum(ld.size or 0 for ld in ml.ledgers), past, ttl, expiry, risk
        )

    async def _ttl_risk(
        self, stored: StoredTopic, ttl: MessageTtl, unread: str | None, now_ms: int
    ) -> tuple[TtlExpiry, str | None]:
        """What a load lets the topic's TTL expire, and why --apply holds the topic back (None: it does not).
        With its own policies unread, its own TTL could be any: a topic with unacknowledged entries is held back
        too."""
        ml = stored.managed_ledger
        if not any(name != COMPACTION_CURSOR for name in stored.cursors) or not (ttl.active or unread is not None):
            return TtlExpiry(ttl), None
        records = await self.ledger_records(stored)
        expiry = ttl_expiry(ml, stored.cursors, ttl, now_ms, records)
        if expiry.at_risk:
            return expiry, (
                f"a load would expire {expiry.describe()} (message TTL {ttl.seconds} s, from the {ttl.source})"
            )
        if unread is not None:
            any_ttl = any_ttl_expiry(ml, stored.cursors, now_ms, records)
            if any_ttl.at_risk:
                return expiry, (
                    f"its own message TTL is unread ({unread}); one set there could expire up to {any_ttl.describe()}"
                )
        return expiry, None

    async def ledger_records(self, stored: StoredTopic) -> dict[int, LedgerRecord]:
        """BookKeeper's records of the topic's first and last ledgers: the last one's entries and close time,
        which its managed-ledger znode leaves blank until a load, and the first one's creation time. A ledger
        whose record is missing or unreadable is left out (not known: ``worker.core.ttl_expiry`` then counts
        its entries as possibly expiring)."""
        ledgers = sorted(ld.ledger_id for ld in stored.managed_ledger.ledgers)
        if self.ledgers is None or not ledgers:
            return {}
        ids = sorted({ledgers[0], ledgers[-1]})
        out: dict[int, LedgerRecord] = {}
        try:
            answers = await self.ledgers.read_ledgers_metadata(ids)
        except (BackendError, UnsupportedLedgerLayout) as e:
            log.warning("ledger metadata not read", topic=str(stored.topic), error=str(e))
            return out
        for lid, got in zip(ids, answers, strict=True):
            if got is None or isinstance(got, BaseException):
                continue
            data, stat = got
            try:
                md = parse_serialized_metadata(lid, data, stat.ctime)
            except MetadataFormatError:
                continue
            closed = md.state == "CLOSED" and md.last_entry_id is not None
            out[lid] = LedgerRecord(
                md.last_entry_id + 1 if closed and md.last_entry_id is not None else None,
                md.ctime_ms,
                stat.mtime if closed else None,
            )
        return out

    async def namespace_retention(self, namespace: str) -> Retention | None:
        """The namespace's ``retention_policies`` from its policies znode (None: unset, the broker default)."""
        policies = await self.namespace_policies(namespace)
        return Retention.from_policy(policies.get("retention_policies"))

    async def namespace_ttl(self, namespace: str) -> int | None:
        """The namespace's ``message_ttl_in_seconds`` from its policies znode (None: unset, the broker default)."""
        ttl = (await self.namespace_policies(namespace)).get("message_ttl_in_seconds")
        return ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None

    async def namespace_policies(self, namespace: str) -> dict[str, Any]:
        """The namespace's policies znode (``/admin/policies/<namespace>``), read once."""
        if namespace not in self._namespace_policies:
            self._namespace_policies[namespace] = asyncio.ensure_future(self._read_namespace_policies(namespace))
        return await self._namespace_policies[namespace]

    async def _read_namespace_policies(self, namespace: str) -> dict[str, Any]:
        got = await self.metadata.namespace_policies(namespace)
        if got is None:
            raise BackendError("zookeeper", f"namespace {namespace} has no policies record")
        try:
            policies = json.loads(got or b"{}")
        except ValueError as e:
            raise BackendError("zookeeper", f"policies of {namespace}: {e}") from e
        return policies if isinstance(policies, dict) else {}

    async def topics(self) -> AsyncIterator[TopicName]:
        """Every persistent topic with a managed-ledger znode in the namespaces (all of them when none were
        named); system topics (``__change_events``, the deletion queue's ``__``-named topics) and Pulsar 5.0's
        segments are left out: their retention is the broker's and the worker's own business."""
        namespaces = self.namespaces or [ns async for ns in self.metadata.namespaces()]
        for ns in namespaces:
            for topic in await self.metadata.persistent_topics(ns):
                if topic.local_name.startswith("__") or topic.is_segment:
                    continue
                yield topic


# --- applying ------------------------------------------------------------------------------------------------


class TrimState:
    """The topics already trimmed, one JSON object a line, appended as each is done (a rerun skips them)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.done: set[str] = set()
        if path.exists():
            for line in path.read_text().splitlines():
                try:
                    d = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash: that topic is trimmed again (harmless)
                if isinstance(d, dict) and isinstance(d.get("topic"), str):
                    self.done.add(d["topic"])

    def record(self, entry: dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        self.done.add(entry["topic"])


@dataclass(frozen=True, slots=True)
class Trimmed:
    topic: str
    ledgers_before: tuple[int, ...]
    ledgers_after: tuple[int, ...] | None  # None: the topic is gone
    bytes_before: int
    bytes_after: int
    error: str | None = None

    @property
    def dropped(self) -> tuple[int, ...]:
        after = set(self.ledgers_after or ())
        return tuple(lid for lid in self.ledgers_before if lid not in after)

    def to_dict(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "ledgers_before": list(self.ledgers_before),
            "ledgers_after": None if self.ledgers_after is None else list(self.ledgers_after),
            "dropped": list(self.dropped),
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "error": self.error,
        }


async def apply_trims(
    admin: PulsarAdmin,
    metadata: PulsarMetadataStore,
    topics: Sequence[IdleTopic],
    state: TrimState,
    *,
    rate: float,
    concurrency: int,
    allow_ttl_expiry: bool = False,
    on_done: Callable[[Trimmed], None] | None = None,
) -> tuple[list[Trimmed], list[str], list[IdleTopic]]:
    """Ask the broker to trim each topic not in ``state``: at most ``rate`` a second, ``concurrency`` at a
    time. A topic whose load may let its message TTL expire unacknowledged backlog (``ttl_risk``) is held back,
    neither trimmed nor recorded, unless ``allow_ttl_expiry``. Returns what each trim did (the topic's ledgers
    and bytes in its znode before and after), the topics skipped as already done and the topics held back."""
    bucket = TokenBucket(rate, 1)
    out: list[Trimmed] = []
    skipped = [str(t.topic) for t in topics if str(t.topic) in state.done]
    held: list[IdleTopic] = []
    ready: list[IdleTopic] = []
    for t in topics:
        if str(t.topic) not in state.done:
            (held if t.ttl_risk is not None and not allow_ttl_expiry else ready).append(t)
    todo = iter(ready)

    async def trimmer() -> None:
        for idle in todo:
            await bucket.acquire()
            before = after = None
            error: str | None = None
            try:
                before = await metadata.stored_topic(idle.topic)
                await admin.trim(idle.topic)
                after = await metadata.stored_topic(idle.topic)
            except (BackendError, NotOwner, TopicNotFound) as e:
                # Not recorded as done: a rerun asks again (a trim is idempotent: it drops only what the
                # broker's rule drops at that time).
                error = f"{type(e).__name__}: {e}"
            if error is not None:
                # What the trim did is not known: the topic's ledgers and bytes are reported as they were.
                after = before
            t = Trimmed(
                str(idle.topic),
                _ids(before),
                None if after is None else _ids(after),
                _bytes(before),
                _bytes(after),
                error,
            )
            if error is None:
                state.record({"topic": t.topic, "dropped": list(t.dropped), "at": int(time.time())})
            else:
                log.warning("trim failed", topic=t.topic, error=error)
            out.append(t)
            if on_done is not None:
                on_done(t)

    await asyncio.gather(*(trimmer() for _ in range(concurrency)))
    out.sort(key=lambda t: t.topic)
    return out, skipped, held


def _ids(s: StoredTopic | None) -> tuple[int, ...]:
    return () if s is None else s.managed_ledger.ledger_ids


def _bytes(s: StoredTopic | None) -> int:
    return 0 if s is None else sum(ld.size or 0 for ld in s.managed_ledger.ledgers)


async def broker_defaults(
    admin: PulsarAdmin, retention: Retention | None = None, ttl: int | None = None
) -> tuple[Retention, int]:
    """The brokers' ``defaultRetentionTimeInMinutes`` / ``defaultRetentionSizeInMB`` and
    ``ttlDurationDefaultInSeconds``, each from a broker's runtime configuration (a superuser's read) unless
    given. Raises BackendError naming the one that cannot be read."""
    if retention is not None and ttl is not None:
        return retention, ttl
    try:
        conf = await admin.broker_runtime_config()
    except BackendError as e:
        what = "default retention" if retention is None else "default message TTL"
        raise BackendError("admin", f"the brokers' {what} is not readable ({e})") from e
    if retention is None:
        try:
            retention = Retention(int(conf["defaultRetentionTimeInMinutes"]), int(conf["defaultRetentionSizeInMB"]))
        except (KeyError, TypeError, ValueError) as e:
            raise BackendError("admin", f"the brokers' default retention is not readable ({e!r})") from e
    if ttl is None:
        try:
            ttl = int(conf["ttlDurationDefaultInSeconds"])
        except (KeyError, TypeError, ValueError) as e:
            raise BackendError("admin", f"the brokers' default message TTL is not readable ({e!r})") from e
    return retention, ttl


async def find_idle_past_retention(
    settings: Settings,
    stores: MetadataStores | None,
    *,
    namespaces: Sequence[str] = (),
    broker_default: Retention | None = None,
    broker_default_ttl: int | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> FindReport:
    """The dry run from the settings: its own admin session and client connection over ``stores`` (the
    nightly audit's "held past retention by idle topics", ``trim-idle``). Needs Pulsar's metadata store."""
    async with open_admin(settings.pulsar) as admin:
        if stores is None:
            raise BackendError(
                "zookeeper", "zookeeper.metadata_store_url is not set: idle topics are read from Pulsar's store"
            )
        default, default_ttl = await broker_defaults(admin, broker_default, broker_default_ttl)
        metadata = stores.pulsar
        # The lists are read once for the whole run: a topic a broker loads meanwhile is that broker's to trim.
        loaded = LoadedTopics(admin, metadata, ttl_s=3600)
        client = blocking_client(settings.pulsar)
        try:
            finder = IdleTrimFinder(
                metadata,
                loaded,
                TopicPolicies(admin, loaded, client),
                broker_default=default,
                broker_default_ttl=default_ttl,
                ledgers=stores.bookkeeper,
                namespaces=namespaces,
                progress=progress,
            )
            return await finder.find()
        finally:
            await asyncio.to_thread(client.close)
