"""The owner of a ledger, read from the custom metadata Pulsar writes on it: one parse for the worker's
identity check (``worker.core.verification``) and the scanner's grouping (and through it the nightly audit).

Pulsar's keys (``LedgerMetadataUtils``): ``application=pulsar``; ``component`` is ``managed-ledger``
(+ ``pulsar/managed-ledger``, + ``pulsar/cursor`` on a cursor's ledger), ``schema`` (+ ``pulsar/schemaId``)
``compacted-ledger`` (+ ``pulsar/compactedTopic``) or ``delayed-index-bucket`` (+ ``pulsar/delayedIndexTopic``,
``pulsar/delayedIndexCursor``, ``pulsar/delayedIndexBucketKey``). The names are not all written alike (checked on a
Pulsar 4.0.8 topic named ``h11 enc:x~é*``):

- ``pulsar/managed-ledger`` is ``TopicName.getPersistenceNamingEncoding``: ``tenant/ns/persistent/<local name
  through java.net.URLEncoder>`` (``h11+enc%3Ax%7E%C3%A9*``);
- ``pulsar/schemaId`` is ``TopicName.getSchemaName``: ``tenant/ns/<encoded local name of the partitioned
  base>``, encoded the same way;
- ``pulsar/compactedTopic`` and ``pulsar/delayedIndexTopic`` are full topic names, not encoded (the latter a
  partition's own), and ``pulsar/delayedIndexCursor`` the subscription name, decoded (``Codec.decode``).

An encoded name is accepted only when it is exactly the encoding of the name it decodes to (the round
trip), so an owner parsed here and a name a message carries compare equal exactly when Pulsar would have
written that message's name. Version-1 names are owners like any other; a v1 topic's schema id drops the
cluster, which is why a schema ledger's registry entry, not its topic, decides whether it is in use
(``worker.core.schema_in_use``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from worker.formats.message import LedgerComponent
from worker.formats.topic_name import InvalidTopicName, TopicName


@dataclass(frozen=True, slots=True)
class Owner:
    """What a ledger's custom metadata says it belongs to."""

    component: LedgerComponent
    topic: TopicName
    cursor: str | None = None
    schema_id: str | None = None


class Unmapped(ValueError):
    """A Pulsar ledger whose owner cannot be determined safely: never deleted, never an orphan candidate.

    ``component`` is what the metadata says the ledger is (None: an unknown component); ``reason`` is the
    rejection a message naming such a ledger gets (the worker's reasons: ``topic_mismatch`` and so on)."""

    def __init__(self, why: str, component: LedgerComponent | None, reason: str) -> None:
        super().__init__(why)
        self.component = component
        self.reason = reason


def topic_of_managed_ledger_name(name: str) -> TopicName:
    """The topic a managed-ledger name (``tenant/ns/persistent/<encoded>``, ``tenant/cluster/ns/...`` for a
    version-1 name, or a scalable topic's segment: ``tenant/ns/segment/<encoded>/<descriptor>``) names; raises
    InvalidTopicName for an unparseable one, or one that is not the canonical encoding of its topic."""
    topic = TopicName.from_managed_ledger_name(name)
    if topic.managed_ledger_name != name:
        raise InvalidTopicName(f"not the managed-ledger name Pulsar writes for {str(topic)!r}: {name!r}")
    return topic


def topic_of_schema_id(schema_id: str) -> TopicName:
    """The base topic a schema id (``tenant/ns/<encoded>``) names; raises InvalidTopicName for an
    unparseable id, one naming a partition, or one that is not the canonical encoding of its topic."""
    topic = TopicName.from_schema_name(schema_id)
    if topic.partition_index is not None:
        raise InvalidTopicName(f"schema id names a partition: {schema_id!r}")
    if topic.schema_name != schema_id:
        raise InvalidTopicName(f"not the schema id Pulsar writes for {str(topic)!r}: {schema_id!r}")
    return topic


def owner_of(custom_metadata: Mapping[str, str]) -> Owner | None:
    """The owner named by a ledger's custom metadata; None for a ledger Pulsar did not create. Raises
    :class:`Unmapped` for a Pulsar ledger whose owner cannot be read safely."""
    cm = custom_metadata
    if cm.get("application") != "pulsar":
        return None
    component = cm.get("component")
    if component == "managed-ledger":
        kind = LedgerComponent.MANAGED_CURSOR if "pulsar/cursor" in cm else LedgerComponent.MANAGED_LEDGER
        ml = cm.get("pulsar/managed-ledger")
        if not ml:
            raise Unmapped("managed-ledger ledger without pulsar/managed-ledger", kind, "topic_mismatch")
        topic = _parse(topic_of_managed_ledger_name, ml, kind, "topic_mismatch")
        if kind is LedgerComponent.MANAGED_CURSOR:
            cursor = cm["pulsar/cursor"]
            if not cursor:
                raise Unmapped("empty pulsar/cursor", kind, "cursor_mismatch")
            return Owner(kind, topic, cursor=cursor)
        return Owner(kind, topic)
    if component == "schema":
        kind = LedgerComponent.SCHEMA_STORAGE
        sid = cm.get("pulsar/schemaId")
        if not sid:
            raise Unmapped("schema ledger without pulsar/schemaId", kind, "schema_mismatch")
        return Owner(kind, _parse(topic_of_schema_id, sid, kind, "schema_mismatch"), schema_id=sid)
    if component == "compacted-ledger":
        kind = LedgerComponent.COMPACTED_LEDGER
        ct = cm.get("pulsar/compactedTopic")
        if not ct:
            raise Unmapped("compacted ledger without pulsar/compactedTopic", kind, "topic_mismatch")
        return Owner(kind, _parse(TopicName.parse, ct, kind, "topic_mismatch"))
    if component == "delayed-index-bucket":
        kind = LedgerComponent.DELAYED_INDEX_BUCKET
        topic_name = cm.get("pulsar/delayedIndexTopic")
        if not topic_name:
            raise Unmapped("bucket ledger without pulsar/delayedIndexTopic", kind, "topic_mismatch")
        subscription = cm.get("pulsar/delayedIndexCursor")
        if not subscription:
            raise Unmapped("bucket ledger without pulsar/delayedIndexCursor", kind, "cursor_mismatch")
        return Owner(kind, _parse(TopicName.parse, topic_name, kind, "topic_mismatch"), cursor=subscription)
    raise Unmapped(f"unknown component {component!r}", None, "component_mismatch")


def _parse(parse: Callable[[str], TopicName], raw: str, kind: LedgerComponent, reason: str) -> TopicName:
    try:
        return parse(raw)
    except InvalidTopicName as e:
        raise Unmapped(f"unparseable owner: {e}", kind, reason) from e
