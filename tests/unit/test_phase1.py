"""Phase 1 and the operator read-outs without I/O: the batch arithmetic, the sent counter, cursor state,
and the ``send`` command's validation.

The batch helper's producer is replaced by a scripted one (our own seam: ``PendingDeleteSender._producer``);
tests/integration/test_phase1.py runs the same helper against the real broker.
"""

from __future__ import annotations

import argparse
import asyncio
import uuid
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from worker.commands.send import build_info
from worker.formats.message import InvalidMessage, LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.metrics import Metrics
from worker.operations.phase1 import MetadataUpdateFailed, PendingDeleteSender, sent_counter
from worker.operations.queue_status import CursorState
from worker.settings import load_settings

T = "persistent://t/ns/x"


def info(lid: int, ledger_type: LedgerType = LedgerType.LEDGER) -> PendingDeleteLedgerInfo:
    ctx = (
        OffloadContext.from_uuid(uuid.uuid4(), "aws-s3", {"bucket": "b"})
        if ledger_type is LedgerType.OFFLOAD_LEDGER
        else None
    )
    return PendingDeleteLedgerInfo(T, LedgerComponent.MANAGED_LEDGER, ledger_type, lid, offload_context=ctx)


class ScriptedProducer:
    def __init__(self, fail: set[tuple[str, int]]) -> None:
        self.fail = fail
        self.sent: list[PendingDeleteLedgerInfo] = []
        self.delays: list[Any] = []

    async def send(self, content: PendingDeleteLedgerInfo, deliver_after: Any = None) -> str:
        self.delays.append(deliver_after)
        if content.dedupe_key in self.fail:
            raise RuntimeError("broker said no")
        self.sent.append(content)
        return f"id-{content.ledger_id}"


def sender(fail: set[tuple[str, int]] = set(), send_delay_s: float = 60) -> tuple[PendingDeleteSender, Metrics]:  # noqa: B006
    metrics = Metrics()
    s = PendingDeleteSender(load_settings(None, worker={"send_delay_s": send_delay_s}), metrics=metrics)
    s._producer = ScriptedProducer(fail)  # type: ignore[assignment]
    return s, metrics


async def test_a_ledger_is_removed_only_when_all_its_messages_are_durable() -> None:
    # Ledger 2 lives in BookKeeper and offloaded: its offloaded copy's message fails, so it stays listed.
    s, metrics = sender(fail={("OFFLOAD_LEDGER", 2)})
    calls: list[list[int]] = []
    result = await s.send_batch(
        [1, 2, 3, 4], [info(1), info(2), info(2, LedgerType.OFFLOAD_LEDGER), info(3)], calls.append
    )
    assert calls == [[2, 4]]
    assert result.removed == (1, 3) and result.kept == (2,) and result.remaining == (2, 4)
    assert [i.dedupe_key for i in result.sent] == [("LEDGER", 1), ("LEDGER", 2), ("LEDGER", 3)]
    assert result.metadata_updated
    assert metrics.registry.get_sample_value("ledger_deletion_sent_total") == 3.0


async def test_callback_may_be_async_and_is_called_once() -> None:
    s, _ = sender()
    calls: list[list[int]] = []

    async def update(remaining: list[int]) -> None:
        calls.append(remaining)

    result = await s.send_batch([5, 6], [info(5), info(6)], update)
    assert calls == [[]] and result.remaining == ()


async def test_callback_failure_carries_the_result() -> None:
    s, _ = sender()

    def update(remaining: list[int]) -> None:
        raise OSError("zk down")

    with pytest.raises(MetadataUpdateFailed, match="zk down") as err:
        await s.send_batch([5, 6], [info(5)], update)
    assert err.value.result.removed == (5,) and not err.value.result.metadata_updated


async def test_send_delay_is_deliver_after() -> None:
    s, _ = sender(send_delay_s=1.5)
    await s.send_pending_delete(info(1))
    s0, _ = sender(send_delay_s=0)
    await s0.send_pending_delete(info(1))
    assert s._producer.delays[0].total_seconds() == 1.5  # type: ignore[union-attr]
    assert s0._producer.delays == [None]  # type: ignore[union-attr]


def test_sent_counter_is_defined_once_per_registry() -> None:
    r = CollectorRegistry()
    c = sent_counter(r)
    assert sent_counter(r) is c
    c.inc()
    assert r.get_sample_value("ledger_deletion_sent_total") == 1.0
    # The default: the process-global registry, also defined once however often it is asked for.
    assert sent_counter() is sent_counter()


def test_cursor_state_from_internal_stats() -> None:
    c = CursorState.from_internal_stats(
        {"markDeletePosition": "148:-1", "individuallyDeletedMessages": "[(148:0..148:1],(148:2..148:4]]"}
    )
    assert c.mark_delete == (148, -1)
    acked = [p for p in [(147, 9), (148, 0), (148, 1), (148, 2), (148, 3), (148, 4), (149, 0)] if c.acked(p)]
    assert acked == [(147, 9), (148, 1), (148, 3), (148, 4)]
    assert not CursorState.from_internal_stats({}).acked((0, 0))


def args(**kw: Any) -> argparse.Namespace:
    base: dict[str, Any] = {
        "topic": T,
        "ledger_id": 9,
        "component": LedgerComponent.MANAGED_LEDGER,
        "ledger_type": LedgerType.LEDGER,
        "cursor": None,
        "schema_id": None,
        "offload_uuid": None,
        "offload_driver": None,
        "driver_metadata": [],
        "property": [],
    }
    base.update(kw)
    return argparse.Namespace(**base)


def test_send_builds_the_message_it_validated() -> None:
    u = uuid.uuid4()
    got = build_info(
        args(
            ledger_type=LedgerType.OFFLOAD_LEDGER,
            offload_uuid=str(u),
            offload_driver="aws-s3",
            driver_metadata=[("bucket", "b"), ("region", "r")],
            property=[("ticket", "1")],
        )
    )
    assert got.offload_context is not None and got.offload_context.uuid == u
    assert dict(got.offload_context.driver_metadata) == {"bucket": "b", "region": "r"}
    assert dict(got.properties) == {"source": "send", "ticket": "1"}
    schema = build_info(args(component=LedgerComponent.SCHEMA_STORAGE, topic=f"{T}-partition-2", schema_id="t/ns/x"))
    assert schema.schema_id == "t/ns/x"


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"component": LedgerComponent.MANAGED_CURSOR}, "needs cursorName"),
        ({"schema_id": "t/ns/x"}, "--schema-id only goes with"),
        ({"component": LedgerComponent.SCHEMA_STORAGE, "schema_id": "t/ns/y"}, "must be the topic's schema id"),
        ({"offload_uuid": str(uuid.uuid4())}, "only go with --type OFFLOAD_LEDGER"),
        ({"ledger_type": LedgerType.OFFLOAD_LEDGER}, "needs --offload-uuid"),
        ({"topic": "persistent://t/ns/"}, "empty or relative segment"),
    ],
)
def test_send_rejects(kw: dict[str, Any], why: str) -> None:
    with pytest.raises(InvalidMessage, match=why):
        build_info(args(**kw))


class CountingProducer:
    """Counts the sends in flight at once; each send yields to the loop so unbounded sends would overlap."""

    def __init__(self) -> None:
        self.outstanding = 0
        self.peak = 0
        self.sent = 0

    async def send(self, content: PendingDeleteLedgerInfo, deliver_after: Any = None) -> str:
        self.outstanding += 1
        self.peak = max(self.peak, self.outstanding)
        try:
            for _ in range(3):
                await asyncio.sleep(0)
            if content.ledger_id % 97 == 0:
                raise RuntimeError("broker said no")
            self.sent += 1
            return f"id-{content.ledger_id}"
        finally:
            self.outstanding -= 1


async def test_batch_bounds_outstanding_sends_and_keeps_the_pip_semantics() -> None:
    s = PendingDeleteSender(load_settings(None), metrics=Metrics(), max_outstanding_sends=8)
    producer = CountingProducer()
    s._producer = producer  # type: ignore[assignment]
    ids = list(range(1, 501))
    calls: list[list[int]] = []
    result = await s.send_batch(ids, [info(i) for i in ids], calls.append)
    assert producer.peak == 8, f"{producer.peak} sends in flight at once"
    failed = [97 * k for k in range(1, 6)]
    assert calls == [failed], "one callback, with exactly the ids whose send failed"
    assert result.kept == tuple(failed) and len(result.removed) == 500 - 5
    assert [i.ledger_id for i in result.sent] == [i for i in ids if i not in failed]  # input order


async def test_concurrent_single_sends_share_the_bound() -> None:
    s = PendingDeleteSender(load_settings(None), metrics=Metrics(), max_outstanding_sends=4)
    producer = CountingProducer()
    s._producer = producer  # type: ignore[assignment]
    await asyncio.gather(*(s.send_pending_delete(info(i)) for i in range(1, 51)))
    assert producer.peak == 4 and producer.sent == 50


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_outstanding_sends"):
        PendingDeleteSender(load_settings(None), metrics=Metrics(), max_outstanding_sends=0)
