"""``dlq list`` and ``inflight --bytes`` through the real CLI: what the queued deletions would free, read from
real BookKeeper ledgers (their lengths read independently from the bookie) and real objects in the S3
server, each copy counted once, unknown where storage records no size (a ledger never closed)."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pulsar
import pytest

from testkit.harness import create_ledgers, pulsar_ml_metadata
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import bookie_length, cli, dead_letter, ml_info, quiet_logger, settings_of, worker_config
from worker.broker.admin import PulsarAdmin
from worker.broker.topology import ensure_topology
from worker.core.freed_bytes import human_bytes
from worker.core.offload_driver_metadata import driver_metadata
from worker.formats import message as m
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.metrics import Metrics
from worker.operations.phase1 import PendingDeleteSender

pytestmark = pytest.mark.integration


async def test_dlq_list_and_inflight_sum_what_the_queued_copies_would_free(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, s3: Any, make_worker: WorkerFactory
) -> None:
    h = worker_config(make_worker, f"cli-bytes-{unique}", worker={"send_delay_s": 300})
    s = settings_of(h)
    await ensure_topology(admin, s.topics)
    topic = f"persistent://{test_namespace}/qb-{unique}"
    closed = create_ledgers(stack, 2, pulsar_ml_metadata(topic), entries=4)
    [never_closed] = create_ledgers(stack, 1, pulsar_ml_metadata(topic), leave_open=True)
    lengths = {lid: bookie_length(stack, lid) for lid in closed}
    assert all(n > 0 for n in lengths.values()), lengths
    gone = 10**12 + 7  # no such ledger: nothing left to free
    # An offloaded copy laid out as Pulsar's offloader names and tags it.
    ctx = OffloadContext.from_uuid(uuid.uuid4(), "aws-s3", driver_metadata(s.offload.s3_targets[0]))
    ml_name = TopicName.parse(topic).managed_ledger_name
    for key, size in ((f"{ctx.uuid}-ledger-77", 1000), (f"{ctx.uuid}-ledger-77-index", 234)):
        s3.put_object(Bucket=stack.s3_bucket, Key=key, Body=b"o" * size, Metadata={"ManagedLedgerName": ml_name})
    offloaded = PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, 77, offload_context=ctx
    )

    async with PendingDeleteSender(s, admin=admin, metrics=Metrics()) as sender:
        for lid in closed:
            await sender.send_pending_delete(ml_info(topic, lid))  # delayed 300 s: queued, not deliverable
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        dead_letter(client, s.topics.retry, m.encode(ml_info(topic, never_closed)), {m.RECONSUMETIMES: "1"})
        props = {m.REASON: "transient", m.RECONSUMETIMES: "10"}
        for info in (*(ml_info(topic, lid) for lid in closed), ml_info(topic, closed[0])):  # one twice
            dead_letter(client, s.topics.dlq, m.encode(info), props)
        for info in (ml_info(topic, never_closed), ml_info(topic, gone), offloaded):
            dead_letter(client, s.topics.dlq, m.encode(info), props)
        dead_letter(client, s.topics.dlq, b"\x00garbage", {m.REASON: "invalid"})
    finally:
        client.close()

    r = cli(h.config_path, "dlq", "list", "--json", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    letters = [json.loads(line) for line in r.stdout.splitlines()]
    assert [(d["ledger_id"], d["bytes"]) for d in letters] == [
        (closed[0], lengths[closed[0]]),
        (closed[1], lengths[closed[1]]),
        (closed[0], lengths[closed[0]]),
        (never_closed, None),  # BookKeeper records a length only at close
        (gone, 0),
        (77, 1234),
        (None, None),
    ]
    freed = sum(lengths.values()) + 1234
    table = cli(h.config_path, "dlq", "list", timeout=120)
    assert table.returncode == 0, table.stderr[-2000:]
    assert "BYTES" in table.stdout.splitlines()[0]
    assert f"would free {human_bytes(freed)} ({freed} bytes) over 5 copies; 1 of unknown size" in table.stdout

    r = cli(h.config_path, "inflight", "--bytes", "--json", timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    report = json.loads(r.stdout)
    by_role = {p["role"]: (p["backlog"], p["queued"]) for p in report["parts"]}
    assert by_role["pending"] == (2, {"bytes": sum(lengths.values()), "copies": 2, "unknown": 0, "complete": True})
    assert by_role["retry"] == (1, {"bytes": 0, "copies": 1, "unknown": 1, "complete": True})
    assert by_role["dlq"] == (7, {"bytes": freed, "copies": 5, "unknown": 1, "complete": True})
    # All queues together, each copy once.
    assert report["queued"] == {"bytes": freed, "copies": 5, "unknown": 1, "complete": True}
    plain = cli(h.config_path, "inflight", timeout=60)
    assert plain.returncode == 0 and "would free" not in plain.stdout  # reading messages is opt-in
    sized = cli(h.config_path, "inflight", "--bytes", timeout=120)
    assert f"would free {human_bytes(freed)} ({freed} bytes) over 5 copies" in sized.stdout, sized.stdout
