"""Topic-level retention and message TTL policies, read the way the brokers read them: from the namespace's
``__change_events`` (Avro ``PulsarEvent`` events keyed by topic, the last one winning, ``DELETE`` or a null value
removing them, each decoded with the schema version it names).

The admin API's topic-policy reads are no way round it: each checks the topic's ownership first, a lookup
that assigns a bundle nobody owns. Reading ``__change_events`` is a lookup of its own bundle too, so it is
read only while a broker lists it as loaded (``worker.broker.loaded_topics``); otherwise the caller says the
namespace's topic policies are unread (docs/cli.md, "``trim-idle``: reclaim what nothing trims").
"""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import fastavro
import pulsar

from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound
from worker.broker.loaded_topics import LoadedTopics
from worker.core.retention import Retention
from worker.errors import BackendError
from worker.formats.topic_name import InvalidTopicName, TopicName
from worker.logs import get_logger

log = get_logger(component="topic_policies")

CHANGE_EVENTS = "__change_events"
# A namespace's events are few (one per policy change); a bound keeps a hostile topic from holding the read.
MAX_EVENTS = 100_000
READ_TIMEOUT_MS = 10_000


@dataclass(frozen=True, slots=True)
class OwnPolicies:
    """The policies a topic sets for itself that ``trim-idle`` needs (None: not set)."""

    retention: Retention | None = None
    message_ttl_s: int | None = None


@dataclass(frozen=True, slots=True)
class NamespaceTopicPolicies:
    """The policies each topic of a namespace sets for itself (its base name -> its policies), or why they
    could not be read (``unread``)."""

    local: Mapping[str, OwnPolicies] = field(default_factory=dict)
    global_: Mapping[str, OwnPolicies] = field(default_factory=dict)
    unread: str | None = None

    def _own(self, topic: TopicName) -> tuple[OwnPolicies | None, OwnPolicies | None]:
        base = str(topic.partitioned_base)
        return self.local.get(base), self.global_.get(base)

    def retention(self, topic: TopicName) -> Retention | None:
        """The topic's own retention: its local policy, else its global one (the broker's order)."""
        local, global_ = self._own(topic)
        return (local.retention if local else None) or (global_.retention if global_ else None)

    def message_ttl(self, topic: TopicName) -> int | None:
        """The topic's own message TTL in seconds: its local policy, else its global one, field by field as the
        broker's ``PolicyHierarchyValue`` does (a 0 set is a value: it wins over the namespace's TTL)."""
        local, global_ = self._own(topic)
        if local is not None and local.message_ttl_s is not None:
            return local.message_ttl_s
        return global_.message_ttl_s if global_ is not None else None


class TopicPolicies:
    """Reads each namespace's topic-level policies once."""

    def __init__(self, admin: PulsarAdmin, loaded: LoadedTopics, client: pulsar.Client) -> None:
        self.admin = admin
        self.loaded = loaded
        self.client = client
        self._read: dict[str, asyncio.Task[NamespaceTopicPolicies]] = {}

    async def of(self, namespace: str) -> NamespaceTopicPolicies:
        if namespace not in self._read:
            self._read[namespace] = asyncio.ensure_future(self._of(namespace))
        return await self._read[namespace]

    async def _of(self, namespace: str) -> NamespaceTopicPolicies:
        try:
            events = TopicName.parse(f"persistent://{namespace}/{CHANGE_EVENTS}")
        except InvalidTopicName as e:
            return NamespaceTopicPolicies(unread=str(e))
        try:
            if await self.loaded.serving(events) is None:
                return NamespaceTopicPolicies(
                    unread=f"no broker has {CHANGE_EVENTS} loaded (reading it would assign its bundle)"
                )
            return await self._read_events(events)
        except (BackendError, NotOwner, TopicNotFound, pulsar.PulsarException, ValueError) as e:
            log.warning("topic policies not read", namespace=namespace, error=str(e))
            return NamespaceTopicPolicies(unread=f"{type(e).__name__}: {e}")

    async def _read_events(self, events: TopicName) -> NamespaceTopicPolicies:
        raw = await asyncio.to_thread(_read_all, self.client, str(events))
        schemas: dict[int, Any] = {}
        local: dict[str, OwnPolicies] = {}
        global_: dict[str, OwnPolicies] = {}
        for key, version, data in raw:
            if not data:  # a tombstone: the topic's policies removed
                for d in (local, global_):
                    d.pop(key, None)
                continue
            if version not in schemas:
                schemas[version] = await self._schema(events, version)
            event = fastavro.schemaless_reader(io.BytesIO(data), schemas[version])
            if isinstance(event, dict):
                _apply(event, local, global_)
        return NamespaceTopicPolicies(local, global_)

    async def _schema(self, events: TopicName, version: int) -> Any:
        d = await self.admin.schema_version(events, version)
        if not isinstance(d.get("data"), str):
            raise BackendError("admin", f"schema {version} of {events}: no Avro definition in {str(d)[:200]}")
        return fastavro.parse_schema(json.loads(d["data"]))


def _apply(event: Mapping[str, Any], local: dict[str, OwnPolicies], global_: dict[str, OwnPolicies]) -> None:
    """One ``PulsarEvent`` onto the topics' policies (the last event of a topic wins: each carries the topic's
    whole ``TopicPolicies``)."""
    if event.get("eventType") != "TOPIC_POLICY":
        return
    tp = event.get("topicPoliciesEvent") or {}
    try:
        topic = str(TopicName.parse(f"{tp.get('domain')}://{tp.get('tenant')}/{tp.get('namespace')}/{tp.get('topic')}"))
    except InvalidTopicName:
        return
    policies = tp.get("policies")
    is_global = bool(policies and policies.get("isGlobal"))
    target = global_ if is_global else local
    if event.get("actionType") == "DELETE" or not policies:
        target.pop(topic, None)
        return
    ttl = policies.get("messageTTLInSeconds")
    own = OwnPolicies(
        Retention.from_policy(policies.get("retentionPolicies")),
        ttl if isinstance(ttl, int) and not isinstance(ttl, bool) else None,
    )
    if own == OwnPolicies():
        target.pop(topic, None)
    else:
        target[topic] = own


def _read_all(client: pulsar.Client, topic: str) -> list[tuple[str, int, bytes]]:
    """Every event on the topic from the earliest: (key, schema version, payload); a non-durable Reader,
    nothing acknowledged."""
    reader = client.create_reader(topic, pulsar.MessageId.earliest)
    out: list[tuple[str, int, bytes]] = []
    try:
        while len(out) < MAX_EVENTS and reader.has_message_available():
            m = reader.read_next(READ_TIMEOUT_MS)
            raw_version = m.schema_version() or ""
            version = int.from_bytes(raw_version.encode("latin-1"), "big") if raw_version else 0
            out.append((m.partition_key(), version, b"" if m.has_null_value() else m.data()))
    finally:
        reader.close()
    return out
