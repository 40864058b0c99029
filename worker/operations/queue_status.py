"""Operator read-outs: how much deletion work is queued (``inflight``) and what is parked (``dlq list``).

Both only read. ``inflight`` asks the admin API for subscription backlogs (PIP-186's "estimated in-flight
ledger deletions": 0 means everything queued is done). ``dlq list`` reads the dead-letter topic with a
Reader, which never acknowledges anything, and tells each message's state from the replay
subscription's cursor (mark-delete position plus individually acknowledged ranges): a dead letter the
nightly replay has acknowledged is "replayed", any other is "parked".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import pulsar

from worker.backends.storage_copy import BookKeeperCopy, OffloadedCopy, StorageCopy
from worker.backends.tiered_storage import TieredStorage
from worker.broker.admin import NotOwner, PulsarAdmin, TopicNotFound, open_admin
from worker.broker.client import blocking_client
from worker.core.freed_bytes import freed_bytes, sum_known
from worker.core.message_properties import attempts_so_far, clamped_int
from worker.core.metadata_stores import MetadataStores
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
    queued: QueuedBytes | None = None  # with ``inflight --bytes`` only


@dataclass(frozen=True, slots=True)
class QueuedBytes:
    """What the queued deletions would free: ``bytes`` summed over the copies whose size storage records
    (``worker.core.freed_bytes``), each copy once; ``unknown`` copies left out of it (a ledger never
    closed, storage unreadable); ``complete`` False when only the first ``--limit`` messages were read."""

    bytes: int
    copies: int
    unknown: int
    complete: bool


@dataclass(frozen=True, slots=True)
class Inflight:
    parts: tuple[Backlog, ...]
    queued: QueuedBytes | None = None  # all parts together, a copy queued twice counted once

    @property
    def total(self) -> int:
        return sum(p.backlog for p in self.parts)

    def to_dict(self) -> dict[str, Any]:
        out = {"total": self.total, "parts": [asdict(p) for p in self.parts]}
        if self.queued is not None:
            out["queued"] = asdict(self.queued)
        return out


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


async def inflight_from_settings(
    settings: Settings, *, with_bytes: bool = False, limit: int = 10_000, stores: MetadataStores | None = None
) -> Inflight:
    """The backlogs; ``with_bytes``: also what the queued deletions would free, from the first ``limit``
    unacknowledged messages of each topic (read with a Reader, nothing acknowledged)."""
    async with open_admin(settings.pulsar) as admin:
        res = await inflight(admin, settings)
    if not with_bytes:
        return res
    parts: list[Backlog] = []
    every: dict[CopyKey, int | None] = {}
    complete = True
    for p in res.parts:
        read = await _list_unacked(settings, p.topic, p.subscription, limit=limit) if p.exists else []
        sized = await sizes_of(settings, [info for _, info in read if info is not None], stores)
        every.update(sized)
        q = _queued(sized, complete=len(read) < limit or len(read) >= p.backlog)
        complete = complete and q.complete
        parts.append(dataclasses.replace(p, queued=q))
    return Inflight(tuple(parts), _queued(every, complete=complete))


def _queued(sized: Mapping[Any, int | None], *, complete: bool) -> QueuedBytes:
    total, unknown = sum_known(sized.values())
    return QueuedBytes(total, len(sized), unknown, complete)


# ---- what a queued deletion would free ----------------------------------------------------------------


async def sizes_of(
    settings: Settings, infos: Sequence[m.PendingDeleteLedgerInfo], stores: MetadataStores | None
) -> dict[CopyKey, int | None]:
    """What deleting each announced copy would free, keyed by :func:`copy_key`, read as the worker reads it
    before a delete (its storage copy's ``inspect``, then ``worker.core.freed_bytes``): a BookKeeper
    ledger's metadata from BookKeeper's store, an offloaded copy's object sizes from tiered storage. 0 when
    storage holds nothing of it (or names storage the worker refuses), None when unknown (never closed,
    no metadata store, a target not there, storage failing). Identity is not judged here: the worker
    still verifies before it deletes, and a rejected copy frees nothing."""
    out: dict[CopyKey, int | None] = {}
    if not infos:
        return out
    async with contextlib.AsyncExitStack() as stack:
        tiered: TieredStorage | None = None
        try:
            tiered = await stack.enter_async_context(TieredStorage(settings.offload))
        except Exception:  # a target not there: offloaded copies are unknown, ledgers still read
            tiered = None
        by_type: dict[m.LedgerType, StorageCopy] = {}
        if stores is not None:
            by_type[m.LedgerType.LEDGER] = BookKeeperCopy(stores.bookkeeper, "zookeeper")
        if tiered is not None:
            by_type[m.LedgerType.OFFLOAD_LEDGER] = OffloadedCopy(tiered)
        sem = asyncio.Semaphore(16)

        async def one(info: m.PendingDeleteLedgerInfo) -> tuple[CopyKey, int | None]:
            copy = by_type.get(info.ledger_type)
            if copy is None:
                return copy_key(info), None
            async with sem:
                try:
                    return copy_key(info), freed_bytes(await copy.inspect(info))
                except Exception:  # unreadable: unknown, never a guess
                    return copy_key(info), None

        unique = {copy_key(i): i for i in infos}
        out.update(await asyncio.gather(*(one(i) for i in unique.values())))
    return out


CopyKey = tuple[str, int, str | None]


def copy_key(info: m.PendingDeleteLedgerInfo) -> CopyKey:
    """One copy of a ledger: its type, id and, offloaded, the offload's uuid (two attempts, two copies)."""
    ctx = info.offload_context
    return info.ledger_type.value, info.ledger_id, str(ctx.uuid) if ctx is not None else None


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
    # What deleting its copy would free (``sizes_of``): None when unknown or undecodable.
    bytes: int | None = None
    offload_uuid: str | None = None  # an OFFLOAD_LEDGER's offload attempt


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
) -> list[tuple[DeadLetter, m.PendingDeleteLedgerInfo | None]]:
    # The blocking client, run in a thread: with the asyncio client, a CLI process that closes its client
    # and exits right away occasionally aborts in the C++ library ("terminate called without an active
    # exception"); the blocking client shuts down deterministically.
    p = settings.pulsar
    client = blocking_client(p)
    out: list[tuple[DeadLetter, m.PendingDeleteLedgerInfo | None]] = []
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
                    out.append((dead_letter_from(msg, "replayed" if replayed else "parked"), _decoded(msg.data())))
            finally:
                reader.close()
    finally:
        client.close()
    return out


def _decoded(data: bytes) -> m.PendingDeleteLedgerInfo | None:
    try:
        return m.decode(data)
    except m.InvalidMessage:
        return None


async def list_dead_letters(
    settings: Settings,
    *,
    limit: int = 1000,
    include_replayed: bool = False,
    with_bytes: bool = True,
    stores: MetadataStores | None = None,
) -> list[DeadLetter]:
    """The DLQ's messages, oldest first, without acknowledging any (a Reader has no subscription); each
    with what deleting its copy would free (``with_bytes``)."""
    t = settings.topics
    read = await _list_unacked(settings, t.dlq, t.dlq_replay_subscription, limit=limit, include=include_replayed)
    if not with_bytes:
        return [d for d, _ in read]
    sizes = await sizes_of(settings, [info for _, info in read if info is not None], stores)
    return [
        d if info is None else dataclasses.replace(d, bytes=sizes.get(copy_key(info)), offload_uuid=copy_key(info)[2])
        for d, info in read
    ]


def would_free(letters: Sequence[DeadLetter]) -> QueuedBytes:
    """What deleting the listed dead letters' copies would free, each copy once (undecodable ones hold none)."""
    copies = {(d.ledger_type, d.ledger_id, d.offload_uuid): d.bytes for d in letters if d.decode_error is None}
    return _queued(copies, complete=True)


async def _list_unacked(
    settings: Settings, topic: str, sub: str, *, limit: int, include: bool = False
) -> list[tuple[DeadLetter, m.PendingDeleteLedgerInfo | None]]:
    """A queue topic's messages ``sub`` has not acknowledged (all with ``include``), oldest first, each
    with its decoded payload; nothing acknowledged."""
    p = settings.pulsar
    queue = TopicName.parse(topic)
    async with open_admin(p) as admin:
        n = await admin.partitions(queue)
        topics: Sequence[TopicName] = [queue.partition(i) for i in range(n)] if n > 0 else [queue]
        cursors = [await _cursor_state(admin, t, sub, p.auth_token) for t in topics]
        if n == 0 and cursors[0] is None and not await _exists(admin, queue, p.auth_token):
            return []
    return await asyncio.to_thread(_read_partitions, settings, topics, cursors, limit, include)


async def _exists(admin: PulsarAdmin, topic: TopicName, token: str | None) -> bool:
    try:
        await topic_stats(admin, topic, token)
        return True
    except TopicNotFound:
        return False
