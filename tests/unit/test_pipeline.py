"""Poison messages through the pipeline's settle step: whatever a message carries (an absurd attempt count, a
payload near the broker's limit, a time that is no time), and whatever fails while settling it, it ends
acknowledged or in the DLQ, never in a redelivery loop.

The pipeline here is the real one (``worker.daemon.pipeline.Pipeline`` with the real ``Settler``); only the decision
and the Pulsar consumer/producers are scripted. The same defects on the real stack:
tests/integration/test_poison_messages.py.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.unit.conftest import FakeMessage
from worker.core.decision import Listing, Outcome, Result, Route
from worker.daemon import pipeline as pipeline_mod
from worker.daemon.pipeline import Pipeline
from worker.daemon.settlement import DeadLetterRefused, Settler
from worker.formats import message as m
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, encode
from worker.metrics import Metrics
from worker.settings import WorkerSettings


class Events:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, dict[str, str], dict[str, Any]]] = []
        self.acked: list[Any] = []

    def names(self) -> list[str]:
        return [s[0] for s in self.sent]


class Consumer:
    def __init__(self, ev: Events) -> None:
        self.ev = ev

    async def acknowledge(self, msg: Any) -> None:
        self.ev.acked.append(msg)

    async def acknowledge_many(self, msgs: list[Any]) -> list[BaseException | None]:
        self.ev.acked.extend(msgs)
        return [None] * len(msgs)


class Producer:
    def __init__(self, name: str, ev: Events, fail: BaseException | None = None) -> None:
        self.name = name
        self.ev = ev
        self.fail = fail

    async def send(self, content: Any, properties: dict[str, str] | None = None, **kw: Any) -> Any:
        if self.fail is not None:
            raise self.fail
        self.ev.sent.append((self.name, content, dict(properties or {}), kw))


class Decider:
    """Returns one scripted decision (or raises it)."""

    def __init__(self, result: Result | BaseException) -> None:
        self.result = result
        self.seen: list[PendingDeleteLedgerInfo] = []

    def storage_proven(self) -> bool:
        return True

    async def decide_info(self, info: PendingDeleteLedgerInfo, dispatch: object = None) -> Result:
        self.seen.append(info)
        if isinstance(self.result, BaseException):
            raise self.result
        return self.result


INFO = PendingDeleteLedgerInfo("persistent://t/ns/topic", LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 7)
RAW = encode(INFO)


def make(
    decider: Decider,
    ev: Events,
    *,
    retry_fail: BaseException | None = None,
    dlq_fail: BaseException | None = None,
    **settings: Any,
) -> Pipeline:
    s = WorkerSettings(**{"max_attempts": 10, **settings})
    metrics = Metrics()
    settler = Settler(
        Consumer(ev),
        Producer("retry", ev, retry_fail),
        Producer("dlq", ev, dlq_fail),
        metrics,
        max_payload_bytes=s.max_payload_bytes,
    )
    return Pipeline(decider=decider, settler=settler, settings=s, metrics=metrics)  # type: ignore[arg-type]


TRANSIENT = Result(Outcome.TRANSIENT, Route.OWNER, "bookie down", stage="bookkeeper")


def Msg(props: dict[str, str] | None = None, data: bytes = RAW, **kw: Any) -> FakeMessage:
    return FakeMessage(props or {}, data=data, **kw)


async def handle(p: Pipeline, msg: FakeMessage) -> Result:
    """What the daemon does with a received message: read it once, then handle it."""
    return await p.handle(p.read([msg])[0])


@pytest.mark.parametrize("count", ["1100", "5000", "100000", "9" * 5000])
async def test_an_absurd_attempt_count_is_dead_lettered_not_looped(count: str) -> None:
    # Defect: the backoff delay was computed before the attempts check, and 60 * 2.0 ** 4999 raises
    # OverflowError: handle() raised, the daemon nacked, and the redelivered copy raised again, forever.
    ev = Events()
    msg = Msg({m.RECONSUMETIMES: count})
    res = await handle(make(Decider(TRANSIENT), ev), msg)
    assert res.outcome is Outcome.TRANSIENT
    assert ev.names() == ["dlq"]
    props = ev.sent[0][2]
    assert props[m.REASON] == "transient"
    assert "attempts exhausted" in props[m.LAST_ERROR]
    assert [a for a in ev.acked] == [msg]


async def test_a_payload_over_the_limit_is_invalid_and_dead_lettered_bounded() -> None:
    ev = Events()
    decider = Decider(TRANSIENT)
    payload = b"\x00" * 200_000
    msg = Msg(data=payload)
    res = await handle(make(decider, ev), msg)
    assert res.outcome is Outcome.INVALID
    assert "max_payload_bytes" in res.reason
    assert decider.seen == []  # not even decoded
    assert ev.names() == ["dlq"]
    _, content, props, _ = ev.sent[0]
    assert content == payload[:1024]
    assert props[m.PAYLOAD_SIZE] == "200000"
    assert props[m.PAYLOAD_SHA256] == hashlib.sha256(payload).hexdigest()
    assert props[m.PAYLOAD_TRUNCATED] == "true"
    assert props[m.REASON] == "invalid"
    assert [a for a in ev.acked] == [msg]


async def test_the_payload_limit_is_a_setting() -> None:
    ev = Events()
    res = await handle(make(Decider(TRANSIENT), ev, max_payload_bytes=2048), Msg(data=RAW + b"\x00" * 2049))
    assert res.outcome is Outcome.INVALID and "max_payload_bytes (2048)" in res.reason
    ev2 = Events()
    res2 = await handle(make(Decider(TRANSIENT), ev2, max_payload_bytes=2048), Msg())
    assert res2.outcome is Outcome.TRANSIENT and ev2.names() == ["retry"]


async def test_a_retry_that_cannot_be_published_ends_in_the_dlq() -> None:
    ev = Events()
    msg = Msg()
    res = await handle(make(Decider(TRANSIENT), ev, retry_fail=RuntimeError("Pulsar error: MessageTooBig")), msg)
    assert res.outcome is Outcome.TRANSIENT
    assert ev.names() == ["dlq"]
    props = ev.sent[0][2]
    assert props[m.REASON] == "transient"
    assert "MessageTooBig" in props[m.LAST_ERROR]
    assert [a for a in ev.acked] == [msg]


async def test_a_decision_that_raises_ends_in_the_dlq() -> None:
    ev = Events()
    msg = Msg()
    res = await handle(make(Decider(KeyError("surprise")), ev), msg)
    assert res.outcome is Outcome.TRANSIENT and res.stage == "settle"
    assert ev.names() == ["dlq"]
    assert "surprise" in ev.sent[0][2][m.LAST_ERROR]
    assert [a for a in ev.acked] == [msg]


async def test_only_a_dlq_that_refuses_everything_hands_the_message_back() -> None:
    # Nothing else can be done without losing it: the daemon negative-acknowledges (tests/unit/test_daemon.py).
    ev = Events()
    p = make(Decider(TRANSIENT), ev, retry_fail=TimeoutError("retry"), dlq_fail=TimeoutError("dlq"))
    with pytest.raises(DeadLetterRefused):
        await handle(p, Msg())
    assert ev.acked == []


async def test_a_first_seen_time_beyond_a_float_does_not_fail_the_ack() -> None:
    # Defect: the end-to-end metric computed now - int(first_seen_ms) in floats: OverflowError after the ack.
    ev = Events()
    msg = Msg({m.FIRST_SEEN_MS: "9" * 400})
    res = await handle(make(Decider(Result(Outcome.DELETED, Route.OWNER)), ev), msg)
    assert res.outcome is Outcome.DELETED
    assert [a for a in ev.acked] == [msg] and ev.sent == []


class RecordingLog:
    def __init__(self) -> None:
        self.records: list[tuple[str, str, dict[str, Any]]] = []
        self.ctx: dict[str, Any] = {}

    def bind(self, **kw: Any) -> RecordingLog:
        child = RecordingLog()
        child.records = self.records
        child.ctx = {**self.ctx, **kw}
        return child

    def _add(self, level: str, event: str, **kw: Any) -> None:
        self.records.append((level, event, {**self.ctx, **kw}))

    def info(self, event: str, **kw: Any) -> None:
        self._add("info", event, **kw)

    def warning(self, event: str, **kw: Any) -> None:
        self._add("warning", event, **kw)

    def error(self, event: str, **kw: Any) -> None:
        self._add("error", event, **kw)


async def test_a_rejected_payload_is_logged_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    # Defect: the REJECTED log line carried the whole decoded record, whatever its size.
    rec = RecordingLog()
    monkeypatch.setattr(pipeline_mod, "log", rec)
    info = PendingDeleteLedgerInfo(
        "persistent://t/ns/topic",
        LedgerComponent.MANAGED_LEDGER,
        LedgerType.LEDGER,
        7,
        properties={f"k{i}": "v" * 1000 for i in range(50)},
    )
    raw = encode(info)
    ev = Events()
    await handle(make(Decider(Result(Outcome.REJECTED, Route.DIRECT, "not this topic's ledger")), ev), Msg(data=raw))
    [(level, _event, fields)] = [r for r in rec.records if "rejected" in r[1]]
    assert level == "warning"
    payload = fields["payload"]
    assert set(payload) == {"size", "sha256", "head"}
    assert payload["size"] == len(raw) > 50_000
    assert payload["sha256"] == hashlib.sha256(raw).hexdigest()
    assert payload["head"].startswith('{"cursorName": null')
    assert len(payload["head"]) <= 1024 + 30
    assert sum(len(str(v)) for v in fields.values()) < 4096
    assert ev.names() == ["dlq"]


@pytest.mark.parametrize("value", [1023, 4 * 1024 * 1024 + 1, 5 * 1024 * 1024])
def test_the_payload_limit_stays_below_the_brokers_message_size(value: int) -> None:
    # At least the 1 KiB a bounded copy keeps; at most 4 MiB, leaving room for the properties of a copy
    # under Pulsar's default maxMessageSize (5 MiB).
    with pytest.raises(ValueError, match="max_payload_bytes"):
        WorkerSettings(max_payload_bytes=value)


# ---- the brokers' own deletions, released when their ledger is still listed --------------------------------------

KEY = b"the-brokers-key"


def marked(props: dict[str, str], data: bytes = RAW) -> dict[str, str]:
    from worker.core.broker_marks import MARK_PROPERTY, signature

    return {**props, MARK_PROPERTY: signature(KEY, data)}


@pytest.mark.parametrize(
    ("props", "listed", "sent", "released"),
    [
        # Signed by the brokers, its ledger still a closed ledger of its topic: acknowledged, no dead letter.
        (marked({m.RECONSUMETIMES: "9"}), Listing.CLOSED_LEDGER, [], True),
        (marked({m.RECONSUMETIMES: "9"}), Listing.CURSOR_LEDGER, [], True),
        # Held by anything else (an open ledger, a compaction, a live bucket): a dead letter.
        (marked({m.RECONSUMETIMES: "9"}), None, ["dlq"], False),
        # The extension's informational property is no mark: anyone can set it.
        ({m.RECONSUMETIMES: "9", "source": "broker-extension"}, Listing.CLOSED_LEDGER, ["dlq"], False),
        # Before exhaustion a broker message is retried like any other.
        (marked({m.RECONSUMETIMES: "2"}), Listing.CLOSED_LEDGER, ["retry"], False),
    ],
)
async def test_a_broker_queued_ledger_still_listed_is_released_not_dead_lettered(
    props: dict[str, str], listed: Listing | None, sent: list[str], released: bool
) -> None:
    ev = Events()
    p = make(Decider(Result(Outcome.IN_USE, Route.OWNER, "referenced by its topic", listed=listed)), ev)
    p.mark_key = KEY
    msg = Msg(props)
    res = await handle(p, msg)
    assert res.outcome is Outcome.IN_USE
    assert ev.names() == sent and ev.acked == [msg]
    assert (p.metrics.dlq.labels(reason="in_use")._value.get() == 1) is (sent == ["dlq"])
    assert (not sent) is released  # released: acknowledged with no successor at all


async def test_a_retry_copy_keeps_the_brokers_mark() -> None:
    # The payload and the properties travel with the copy: the mark verifies on the next attempt too.
    ev = Events()
    p = make(Decider(Result(Outcome.IN_USE, Route.OWNER, "referenced", listed=Listing.CLOSED_LEDGER)), ev)
    p.mark_key = KEY
    await handle(p, Msg(marked({})))
    [(_, data, props, _)] = ev.sent
    assert p.read([Msg(props, data=data)])[0].broker_mark


async def test_no_batch_is_swept_before_the_storage_is_proven() -> None:
    class Unproven(Decider):
        def storage_proven(self) -> bool:
            return False

        @property
        def metadata(self) -> Any:
            raise AssertionError("the sweep read BookKeeper's store before its storage was proven")

    p = make(Unproven(TRANSIENT), Events())
    envs = p.read([Msg(), Msg()])
    left, reads = await p.settle_already_gone(envs)
    assert left == envs and reads == {}


def decoded(p: Pipeline) -> dict[tuple[str, str], float]:
    """The pipeline's ``ledger_deletion_decoded_total`` samples by (source, writer)."""
    return {
        (s.labels["source"], s.labels["writer"]): s.value
        for fam in p.metrics.decoded.collect()
        for s in fam.samples
        if s.name.endswith("_total")
    }


def written_by(ledger_id: int, **properties: str) -> bytes:
    return encode(
        PendingDeleteLedgerInfo(
            INFO.topic_name, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id, properties=properties
        )
    )


async def test_each_decoded_record_is_counted_by_its_source_and_writer() -> None:
    p = make(Decider(Result(Outcome.DELETED, Route.DIRECT, "deleted")), Events())
    await handle(p, Msg(data=written_by(1, source="broker-extension", broker="b1", pulsar_version="4.0.8")))
    await handle(p, Msg(data=written_by(2, source="broker-extension", broker="b2", pulsar_version="5.0.0-M1")))
    await handle(p, Msg(data=written_by(3, source="broker-extension", broker="b2", pulsar_version="5.0.0-M1")))
    await handle(p, Msg(data=written_by(4, source="scanner")))
    await handle(p, Msg(data=b"not avro"))  # received, not decoded
    assert decoded(p) == {
        ("broker-extension", "4.0.8"): 1,
        ("broker-extension", "5.0.0-M1"): 2,
        ("scanner", "unknown"): 1,
    }
    assert p.metrics.received._value.get() == 5


async def test_the_already_gone_sweep_counts_each_message_under_its_own_writer() -> None:
    class Gone(Decider):
        """Every ledger asked about is missing from BookKeeper's metadata store: the sweep settles them all."""

        def __init__(self) -> None:
            super().__init__(TRANSIENT)
            self.bookkeeper = self

        async def read_ledgers_metadata(self, ids: list[int]) -> list[None]:
            return [None] * len(ids)

    ev = Events()
    p = make(Gone(), ev)
    envs = p.read(
        [
            Msg(data=written_by(1, source="broker-extension", pulsar_version="4.0.8")),
            Msg(data=written_by(2, source="broker-extension", pulsar_version="5.0.0-M1")),
            Msg(data=written_by(3, source="broker-extension", pulsar_version="5.0.0-M1")),
            Msg(data=written_by(4)),
        ]
    )
    left, _ = await p.settle_already_gone(envs)
    assert left == [] and len(ev.acked) == 4
    assert decoded(p) == {
        ("broker-extension", "4.0.8"): 1,
        ("broker-extension", "5.0.0-M1"): 2,
        ("unknown", "unknown"): 1,
    }
    assert p.metrics.received._value.get() == 4
