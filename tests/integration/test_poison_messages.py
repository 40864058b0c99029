"""Poison messages through the real worker daemon on the real stack: each ends in the DLQ with a reason, and
the pending backlog drains. Before the fix each one was negative-acknowledged and redelivered forever:

(a) RECONSUMETIMES=100000 on a message whose decision is transient: the backoff delay, computed before the
    attempts check, overflowed a float (2.0 ** 99999);
(b) a payload close to the broker's maxMessageSize (5 MiB, Pulsar's default; the local stack keeps it): its
    DLQ copy, the same payload plus the worker's properties, is refused as MessageTooBig;
(c) a small, genuine payload with a property that fills the message: its retry copy and its DLQ copy are
    both refused as MessageTooBig.

The transient decision comes from a bookie that cannot be reached (the worker's bookkeeper.http_url points
at a closed port) about a ledger that exists (a missing one is already gone: its batch's sweep settles it
from BookKeeper's metadata store, bookie or not); the rest of the stack is real.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pulsar
import pytest

from testkit.harness import create_ledgers, free_port, pulsar_ml_metadata
from testkit.topics import eventually
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import quiet_logger
from worker.broker.admin import PulsarAdmin
from worker.formats import message as m
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, encode
from worker.formats.topic_name import TopicName
from worker.settings import TopicsSettings

pytestmark = pytest.mark.integration

MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # the broker's maxMessageSize (config/standalone.conf keeps the default)


async def _backlog(admin: PulsarAdmin, topic: str, subscription: str) -> int:
    tn = TopicName.parse(topic)
    get = admin.partitioned_stats if await admin.partitions(tn) > 0 else admin.stats
    st = await get(tn)
    return int(((st.get("subscriptions") or {}).get(subscription) or {}).get("msgBacklog", 0))


async def test_poison_messages_end_in_the_dlq_and_the_pending_backlog_drains(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    w = make_worker(f"poison-{unique}", bookkeeper={"http_url": f"http://127.0.0.1:{free_port()}"})
    t = w.topics
    topic = f"persistent://{test_namespace}/poison-{unique}"
    [ledger] = create_ledgers(stack, 1, pulsar_ml_metadata(topic))
    info = PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger)
    genuine = encode(info)
    # (b): just under maxMessageSize with the message's own metadata (~30 bytes), so the broker takes it;
    # a copy with the worker's ~300 bytes of properties is over.
    near_limit = bytes(range(256)) * ((MAX_MESSAGE_SIZE - 64) // 256)
    filler = "f" * (MAX_MESSAGE_SIZE - len(genuine) - 200)

    client = pulsar.Client(stack.service_url, logger=quiet_logger(), operation_timeout_seconds=30)
    try:
        producer = client.create_producer(t["pending"], batching_enabled=False)
        producer.send(genuine, properties={m.RECONSUMETIMES: "100000", "case": "a"})
        producer.send(near_limit)
        producer.send(genuine, properties={"case": "c", "filler": filler})
        producer.close()
    finally:
        client.close()

    async def dead_lettered() -> bool:
        return w.metric("ledger_deletion_dlq_total") >= 3

    await eventually(dead_lettered, timeout=90, what=f"3 poison messages dead-lettered\n{w.log_tail(20)}")

    sub = t.get("subscription", TopicsSettings().subscription)

    async def drained() -> bool:
        return await _backlog(admin, t["pending"], sub) == 0 and await _backlog(admin, t["retry"], sub) == 0

    await eventually(drained, timeout=30, what="the pending and retry backlogs drained")

    dead = w.read_dlq()
    assert len(dead) == 3, [d.properties() for d in dead]
    by_case: dict[str, Any] = {}
    for d in dead:
        p = d.properties()
        by_case[p.get("case") or "b"] = d

    a = by_case["a"].properties()
    assert a[m.REASON] == "transient"
    assert a[m.LAST_ERROR].startswith("attempts exhausted (100001)")
    assert a[m.RECONSUMETIMES] == "100001"
    assert by_case["a"].data() == genuine

    b = by_case["b"]
    bp = b.properties()
    assert bp[m.REASON] == "invalid"
    assert "max_payload_bytes" in bp[m.LAST_ERROR]
    assert bp[m.PAYLOAD_TRUNCATED] == "true"
    assert bp[m.PAYLOAD_SIZE] == str(len(near_limit))
    assert bp[m.PAYLOAD_SHA256] == hashlib.sha256(near_limit).hexdigest()
    assert b.data() == near_limit[:1024]

    c = by_case["c"]
    cp = c.properties()
    assert cp[m.REASON] == "transient"
    assert "MessageTooBig" in cp[m.LAST_ERROR]
    assert cp[m.PAYLOAD_TRUNCATED] == "false" and int(cp[m.PROPERTIES_TRUNCATED]) >= 1
    assert len(cp["filler"]) == 1024
    assert c.data() == genuine  # kept whole: the nightly replay can still decide it

    # None of them went round the retry topic, and none is still being redelivered.
    assert w.metric("ledger_deletion_retried_total") == 0
    assert w.metric("ledger_deletion_received_total") == 3
    assert w.metric("ledger_deletion_failed_total", stage="settle") == 1  # (c)'s refused retry copy
