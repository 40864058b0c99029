"""Who owns a ledger (``worker.core.ledger_owner``), read from the metadata Pulsar writes on it: encoded, v1 and
segment names, delayed-delivery buckets, and the worker's identity check agreeing with that owner."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.fakes import BUCKET_CM, BUCKET_T, md, message_for, pulsar_metadata
from worker.core.ledger_owner import (
    LedgerComponent,
    Owner,
    Unmapped,
    owner_of,
    topic_of_managed_ledger_name,
    topic_of_schema_id,
)
from worker.core.verification import bookkeeper_rejection, offload_rejection
from worker.formats.message import LedgerType, PendingDeleteLedgerInfo
from worker.formats.topic_name import InvalidTopicName, TopicName

# A name Pulsar encodes, as it stored it on the local stack (Pulsar 4.0.8): java.net.URLEncoder turns the
# space into "+", ":" "~" and "é" into escapes, and keeps "*".
ENCODED = TopicName.parse("persistent://t/ns/h11 enc:x~é*")
ENCODED_ML = "t/ns/persistent/h11+enc%3Ax%7E%C3%A9*"
ENCODED_SID = "t/ns/h11+enc%3Ax%7E%C3%A9*"


# ---- the owner: encoded names, both ways ------------------------------------------------------------------


def test_encoded_names_read_as_pulsar_writes_them() -> None:
    # metadata -> owner: decoded
    assert owner_of(pulsar_metadata(ENCODED, LedgerComponent.MANAGED_LEDGER)) == Owner(
        LedgerComponent.MANAGED_LEDGER, ENCODED
    )
    assert topic_of_managed_ledger_name(ENCODED_ML) == ENCODED
    assert topic_of_schema_id(ENCODED_SID) == ENCODED
    # topic -> metadata: encoded
    assert ENCODED.managed_ledger_name == ENCODED_ML and ENCODED.schema_name == ENCODED_SID


@pytest.mark.parametrize("component", list(LedgerComponent))
def test_a_scanned_ledger_of_an_encoded_topic_verifies_as_the_worker_checks_it(component: LedgerComponent) -> None:
    # Defect: the scanner skipped every name needing URL encoding ("not supported") while the worker
    # verified and deleted the same ledgers when phase 1 queued them.
    ledger = md(9, pulsar_metadata(ENCODED, component))
    owner = owner_of(ledger.custom_metadata)
    assert owner is not None and owner.topic == ENCODED
    why = bookkeeper_rejection(message_for(owner, 9), ledger)
    assert why is None, why


@pytest.mark.parametrize(
    "name",
    [
        "t/ns/persistent/h11%20enc",  # a space Java writes as "+"
        "t/ns/persistent/a%3ab",  # lower-case escape
        "t/ns/persistent/a%7e",  # "~" is escaped by Java, and upper-case
        "t/ns/persistent/%2A",  # "*" is not escaped by Java
    ],
)
def test_a_name_pulsar_would_not_write_is_refused_both_ways(name: str) -> None:
    with pytest.raises(InvalidTopicName, match="not the managed-ledger name Pulsar writes"):
        topic_of_managed_ledger_name(name)
    cm = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": name}
    with pytest.raises(Unmapped):
        owner_of(cm)
    # The worker, told the decoded topic, rejects it: the name is not the one Pulsar writes for it.
    topic = TopicName.from_managed_ledger_name(name)
    info = PendingDeleteLedgerInfo(str(topic), LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1)
    assert bookkeeper_rejection(info, md(1, cm)) == "topic_mismatch"
    assert offload_rejection(info, {"ManagedLedgerName": name}) == "topic_mismatch"


# ---- the owner: v1 names ----------------------------------------------------------------------------------

V1_ML = "pulsar/standalone/127.0.0.1:8080/persistent/healthcheck"  # the broker's health check topic


def test_v1_names_are_owners_both_ways() -> None:
    # metadata -> owner: the broker's own names for a v1 topic's ledgers
    v1 = TopicName.parse("persistent://pulsar/standalone/127.0.0.1:8080/healthcheck")
    cm = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": V1_ML}
    assert owner_of(cm) == Owner(LedgerComponent.MANAGED_LEDGER, v1)
    assert owner_of({**cm, "pulsar/cursor": "sub"}) == Owner(LedgerComponent.MANAGED_CURSOR, v1, cursor="sub")
    compacted = {"application": "pulsar", "component": "compacted-ledger", "pulsar/compactedTopic": str(v1)}
    assert owner_of(compacted) == Owner(LedgerComponent.COMPACTED_LEDGER, v1)
    # message -> owner: a message naming a v1 topic is a message like any other, verified against the same names
    info = PendingDeleteLedgerInfo(str(v1), LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1)
    assert info.topic == v1
    assert bookkeeper_rejection(info, md(1, cm)) is None
    v2_named = {**cm, "pulsar/managed-ledger": "pulsar/127.0.0.1:8080/persistent/healthcheck"}
    assert bookkeeper_rejection(info, md(1, v2_named)) is not None


# ---- the owner: scalable-topic segments (Pulsar 5.0) -------------------------------------------------------

SEGMENT_ML = "public/default/segment/sc-try1/8000-ffff-1"  # a 5.0.0-M1 broker's segment ledger


def test_a_segment_ledger_is_owned_by_its_segment() -> None:
    # Defect: five parts read as a v1 name, so a segment's ledgers were never found live or orphaned.
    seg = TopicName.parse("segment://public/default/sc-try1/8000-ffff-1")
    cm = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": SEGMENT_ML}
    assert owner_of(cm) == Owner(LedgerComponent.MANAGED_LEDGER, seg)
    assert owner_of({**cm, "pulsar/cursor": "sub"}) == Owner(LedgerComponent.MANAGED_CURSOR, seg, cursor="sub")
    assert topic_of_managed_ledger_name(SEGMENT_ML) == seg
    # the worker's identity check agrees with the scanner's parse: the segment's own message passes, a
    # message naming the scalable topic's persistent namesake does not
    info = PendingDeleteLedgerInfo(str(seg), LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1)
    assert bookkeeper_rejection(info, md(1, cm)) is None
    namesake = PendingDeleteLedgerInfo(
        "persistent://public/default/sc-try1", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1
    )
    assert bookkeeper_rejection(namesake, md(1, cm)) == "topic_mismatch"
    assert offload_rejection(info, {"ManagedLedgerName": SEGMENT_ML}) is None


def test_a_segment_ml_name_pulsar_would_not_write_is_refused() -> None:
    for name in ("public/default/segment/sc-try1/8000-FFFF-1", "public/default/segment/sc%2dtry1/8000-ffff-1"):
        cm = {"application": "pulsar", "component": "managed-ledger", "pulsar/managed-ledger": name}
        with pytest.raises(Unmapped):
            owner_of(cm)


def test_a_v1_topics_schema_id_reads_as_a_v2_name() -> None:
    # Pulsar's getSchemaName drops the cluster: the health check's schema is kept under a v2-style id
    # whose topic does not exist. Its owner is that v2 name; the registry decides (schema_in_use).
    owner = owner_of(
        {"application": "pulsar", "component": "schema", "pulsar/schemaId": "pulsar/127.0.0.1:8080/healthcheck"}
    )
    assert owner == Owner(
        LedgerComponent.SCHEMA_STORAGE,
        TopicName.parse("persistent://pulsar/127.0.0.1:8080/healthcheck"),
        schema_id="pulsar/127.0.0.1:8080/healthcheck",
    )


local_names = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12).filter(
    lambda s: "/" not in s and s not in (".", "..")
)


@settings(max_examples=400, deadline=None)
@given(local_names, st.sampled_from(list(LedgerComponent)), st.text(min_size=1, max_size=5))
def test_whatever_the_name_scanner_owner_and_worker_identity_agree(
    local: str, component: LedgerComponent, cursor: str
) -> None:
    topic = TopicName.parse(f"persistent://t/ns/{local}")
    ledger = md(5, pulsar_metadata(topic, component, cursor))
    try:
        owner = owner_of(ledger.custom_metadata)
    except Unmapped:
        # Only a schema ledger of a partition's name is refused: schemas are kept per base topic.
        assert component is LedgerComponent.SCHEMA_STORAGE and topic.partition_index is not None
        return
    assert owner is not None
    expected = topic.partitioned_base if component is LedgerComponent.SCHEMA_STORAGE else topic
    assert owner.topic == expected
    assert bookkeeper_rejection(message_for(owner, 5), ledger) is None


# ---- the owner: delayed-delivery bucket ledgers ---------------------------------------------------------------


def test_owner_of_a_bucket_ledger() -> None:
    assert owner_of(BUCKET_CM) == Owner(LedgerComponent.DELAYED_INDEX_BUCKET, BUCKET_T, cursor="my sub")


@pytest.mark.parametrize(
    ("drop", "reason"),
    [("pulsar/delayedIndexTopic", "topic_mismatch"), ("pulsar/delayedIndexCursor", "cursor_mismatch")],
)
def test_a_bucket_ledger_without_its_owner_is_unmapped(drop: str, reason: str) -> None:
    cm = {k: v for k, v in BUCKET_CM.items() if k != drop}
    with pytest.raises(Unmapped) as e:
        owner_of(cm)
    assert e.value.component is LedgerComponent.DELAYED_INDEX_BUCKET
    assert e.value.reason == reason


def test_a_bucket_ledger_naming_an_unparseable_topic_is_unmapped() -> None:
    with pytest.raises(Unmapped):
        owner_of({**BUCKET_CM, "pulsar/delayedIndexTopic": "not a topic"})
