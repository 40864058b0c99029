"""Operator read-outs: how much deletion work is queued (``inflight``) and what is parked (``dlq list``).

Both only read. ``inflight`` asks the admin API for subscription backlogs (PIP-186's "estimated in-flight
ledger deletions": 0 means everything queued is done). ``dlq list`` reads the dead-letter topic with a
Reader, which never acknowledges anything, and tells each message's state from the replay
subscription's cursor (mark-delete position plus individually acknowledged ranges): a dead letter the
nightly replay has acknowledged is "replayed", any other is "parked".
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pulsar

from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound, open_admin
from worker.broker.client import blocking_client
from worker.core.message_properties import attempts_so_far, clamped_int
from worker.formats import message as m
from worker.formats.topic_name import TopicName
from worker.settings import Settings


async def on_owner(admin: PulsarAdmin, topic: TopicName, token: str | None) -> PulsarAdmin:
    """The same client aimed at the broker that owns ``topic``.

    Per-topic admin calls answer 307 on any other broker, and ``PulsarAdmin`` deliberately never follows
    redirects (the worker must notice ownership moves); an operator read-out just asks the owner.
    """
    owner = await admin.lookup(topic)
    return admin.at(owner)


async def topic_stats(admin: PulsarAdmin, topic: TopicName, token: str | None = None) -> dict[str, Any]:
    try:
        return await admin.stats(topic)
    except NotOwner:
        return await (await on_owner(admin, topic, token)).stats(topic)


async def topic_internal_stats(admin: PulsarAdmin, topic: TopicName, token: str | None = None) -> dict[str, Any]:
    try:
        return await admin.internal_stats(topic)
    except NotOwner:
        return await (await on_owner(admin, topic, token)).internal_stats(topic)


# ---- inflight -----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Backlog:
    role: str  # pending | retry | dlq
    topic: str
    subscription: str
    backlog: int
    exists: bool


@dataclass(frozen=True, slots=True)
class Inflight:
    parts: tuple[Backlog, ...]

    @property
    def total(self) -> int:
        return sum(p.backlog for p in self.parts)

    def to_dict(self) -> dict[str, Any]:
        return {"total": self.total, "parts": [asdict(p) for p in self.parts]}


async def _backlog(admin: PulsarAdmin, role: str, topic: str, subscription: str, token: str | None) -> Backlog:
    tn = TopicName.parse(topic)
    try:
        # partitioned-stats sums the partitions; a non-partitioned topic only answers plain stats.
        st = await (admin.partitioned_stats(tn) if await admin.partitions(tn) > 0 else topic_stats(admin, tn, token))
    except TopicNotFound:
        return Backlog(role, topic, subscription, 0, False)
    sub = (st.get("subscriptions") or {}).get(subscription) or {}
    return Backlog(role, topic, subscription, int(sub.get("msgBacklog", 0)), True)


async def inflight(admin: PulsarAdmin, settings: Settings) -> Inflight:
    t = settings.topics
    tok = settings.pulsar.auth_token
    parts = await asyncio.gather(
        _backlog(admin, "pending", t.pending, t.subscription, tok),
        _backlog(admin, "retry", t.retry, t.subscription, tok),
        _backlog(admin, "dlq", t.dlq, t.dlq_replay_subscription, tok),
    )
    return Inflight(tuple(parts))


async def inflight_from_settings(settings: Settings) -> Inflight:
    async with open_admin(settings.pulsar) as admin:
        return await inflight(admin, settings)


# ---- dlq list -----------------------------------------------------------------------------------------

_POS = re.compile(r"^(-?\d+):(-?\d+)$")
_RANGE = re.compile(r"\((-?\d+):(-?\d+)\.\.(-?\d+):(-?\d+)\]")


@dataclass(frozen=True, slots=True)
class CursorState:
    """Which positions a subscription has acknowledged: everything up to ``mark_delete`` plus the
    open-closed ranges ``(a..b]`` of ``individuallyDeletedMessages``."""

    mark_delete: tuple[int, int]
    ranges: tuple[tuple[tuple[int, int], tuple[int, int]], ...] = ()

    def acked(self, pos: tuple[int, int]) -> bool:
        if pos <= self.mark_delete:
            return True
        return any(lo < pos <= hi for lo, hi in self.ranges)

    @classmethod
    def from_internal_stats(cls, cursor: dict[str, Any]) -> CursorState:
        md = _POS.match(str(cursor.get("markDeletePosition", "")))
        mark = (int(md.group(1)), int(md.group(2))) if md else (-1, -1)
        ranges = tuple(
            ((int(a), int(b)), (int(c), int(d)))
            for a, b, c, d in _RANGE.findall(str(cursor.get("individuallyDeletedMessages", "")))
        )
        return cls(mark, ranges)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    message_id: str
    state: str  # parked | replayed
    ledger_id: int | None
    ledger_type: str | None
    topic: str | None
    component: str | None
    reason: str
    last_error: str
    attempts: int | None
    first_seen_ms: int | None
    publish_time_ms: int
    decode_error: str | None = None


def dead_letter_from(msg: pulsar.Message, state: str) -> DeadLetter:
    props = msg.properties()
    try:
        info = m.decode(msg.data())
        seen = m.PartialInfo(
            info.topic_name, info.ledger_component.value, None, None, info.ledger_type.value, info.ledger_id
        )
        err = None
    except m.InvalidMessage as e:
        # Undecodable payloads are exactly what lands here with reason "invalid": show them, not fail,
        # and show what can be read of them (a payload that fails validation still names its ledger).
        seen, err = m.decode_lenient(msg.data()), str(e)
    return DeadLetter(
        message_id=str(msg.message_id()),
        state=state,
        ledger_id=seen.ledger_id,
        ledger_type=seen.ledger_type,
        topic=seen.topic_name,
        component=seen.ledger_component,
        reason=props.get(m.REASON, ""),
        last_error=props.get(m.LAST_ERROR, ""),
        attempts=attempts_so_far(props) if m.RECONSUMETIMES in props else None,
        first_seen_ms=clamped_int(props.get(m.FIRST_SEEN_MS), 0, int(time.time() * 1000)),
        publish_time_ms=int(msg.publish_timestamp()),
        decode_error=err,
    )


async def _cursor_state(
    admin: PulsarAdmin, topic: TopicName, subscription: str, token: str | None
) -> CursorState | None:
    try:
        stats = await topic_internal_stats(admin, topic, token)
    except TopicNotFound:
        return None
    cursor = (stats.get("cursors") or {}).get(subscription)
    return CursorState.from_internal_stats(cursor) if cursor else None


def _read_partitions(
    settings: Settings, topics: Sequence[TopicName], cursors: Sequence[CursorState | None], limit: int, include: bool
) -> list[DeadLetter]:
    # The blocking client, run in a thread: with the asyncio client, a CLI process that closes its client
    # and exits right away occasionally aborts in the C++ library ("terminate called without an active
    # exception"); the blocking client shuts down deterministically.
    p = settings.pulsar
    client = blocking_client(p)
    out: list[DeadLetter] = []
    try:
        for topic, cursor in zip(topics, cursors, strict=True):
            reader = client.create_reader(str(topic), pulsar.MessageId.earliest)
            try:
                while len(out) < limit and reader.has_message_available():
                    msg = reader.read_next(timeout_millis=int(p.request_timeout_s * 1000))
                    mid = msg.message_id()
                    # Without the replay subscription nothing can have been replayed yet: all parked.
                    replayed = cursor is not None and cursor.acked((mid.ledger_id(), mid.entry_id()))
                    if replayed and not include:
                        continue
                    out.append(dead_letter_from(msg, "replayed" if replayed else "parked"))
            finally:
                reader.close()
    finally:
        client.close()
    return out


async def list_dead_letters(
    settings: Settings, *, limit: int = 1000, include_replayed: bool = False
) -> list[DeadLetter]:
    """The DLQ's messages, oldest first, without acknowledging any (a Reader has no subscription)."""
    p = settings.pulsar
    dlq = TopicName.parse(settings.topics.dlq)
    sub = settings.topics.dlq_replay_subscription
    async with open_admin(p) as admin:
        n = await admin.partitions(dlq)
        topics: Sequence[TopicName] = [dlq.partition(i) for i in range(n)] if n > 0 else [dlq]
        cursors = [await _cursor_state(admin, t, sub, p.auth_token) for t in topics]
        if n == 0 and cursors[0] is None and not await _exists(admin, dlq, p.auth_token):
            return []
    return await asyncio.to_thread(_read_partitions, settings, topics, cursors, limit, include_replayed)


async def _exists(admin: PulsarAdmin, topic: TopicName, token: str | None) -> bool:
    try:
        await topic_stats(admin, topic, token)
        return True
    except TopicNotFound:
        return False
