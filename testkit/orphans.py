"""Real orphans, made on the live stack the way production gets them.

An orphan is a ledger BookKeeper still stores that no topic references any more. Production makes them
when the broker dies (or a delete fails) between "drop the id from the topic's metadata" and "delete the
ledger"; here the metadata is edited in ZooKeeper behind the broker's back, which leaves exactly that
state: the topic's metadata and BookKeeper disagree, and nothing will ever reconcile them.

What the broker does that these helpers work around (Pulsar 4.0.8, observed on the local stack):
- unload closes the topic gracefully: the managed-ledger znode is left as it is, each cursor znode is
  rewritten with its position and ``cursorsLedgerId = -1``, and the cursor ledger is then *deleted*;
- any admin call that needs the topic (``internalStats`` included) loads it again: the broker recovers the
  last ledger, creates a new one and writes the managed-ledger znode (new version);
- with the managed-ledger and cursor znodes gone, unloading fails to persist the cursors ("Failed to close
  managed ledger, proceeding anyway") and therefore keeps their ledgers, but still drops the topic.

Callers must close their producers and consumers first: a connected client reloads the topic at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from kazoo.exceptions import NoNodeError, NotEmptyError

from testkit.admin import StagingAdmin
from testkit.managed_ledger_encoding import without_ledgers
from testkit.topics import eventually, ml_ledger_ids
from worker.backends.stores import Stores
from worker.broker.admin import TopicNotFound
from worker.formats.managed_ledger_metadata import parse_managed_ledger_info
from worker.formats.metadata_paths import managed_ledger_path
from worker.formats.protobuf_wire import encode_varint
from worker.formats.topic_name import TopicName, java_url_encode

ATTEMPTS = 5


def partitioned_metadata_path(topic: TopicName) -> str:
    """Where the broker keeps ``{"partitions": N, ...}`` of a partitioned topic."""
    return f"/admin/partitioned-topics/{topic.namespace_name}/{topic.domain}/{java_url_encode(topic.local_name)}"


async def partition_count(admin: StagingAdmin, topic: TopicName) -> int:
    """Partitions of ``topic``; 0 when it is not partitioned or does not exist (the broker answers 404)."""
    try:
        return await admin.partitions(topic)
    except TopicNotFound:
        return 0


async def _missing_in_bookkeeper(zk: Stores, ids: Iterable[int]) -> list[int]:
    return [i for i in sorted(ids) if not await zk.bookkeeper.ledger_metadata_exists(i)]


async def drop_ledgers_from_metadata(
    admin: StagingAdmin, zk_hosts: str, topic: TopicName | str, ledger_ids: Iterable[int]
) -> list[int]:
    """Make the topic forget ``ledger_ids`` while BookKeeper keeps them; returns the ids orphaned.

    The ids must be ledgers of the topic's managed ledger (not cursor ledgers). The topic stays usable:
    it is reloaded before returning, and readers skip the ledgers it no longer lists.
    """
    t = TopicName.parse(str(topic))
    ids = set(ledger_ids)
    if not ids:
        return []
    listed = set(ml_ledger_ids(await admin.internal_stats(t)))
    if not ids <= listed:
        raise ValueError(f"{t} does not list ledgers {sorted(ids - listed)}: nothing of it to orphan")

    path = managed_ledger_path(t)
    async with Stores(f"zk:{zk_hosts}") as zk:
        for _ in range(ATTEMPTS):
            await admin.unload(t)
            # Edit only after the unload completed: a loaded managed ledger keeps its list in memory and
            # would either overwrite our edit or be fenced by it. The versioned set catches a broker that
            # wrote in between (e.g. a client reloaded the topic): then unload and edit again.
            got = await zk.kv.get(path)
            if got is None:
                raise AssertionError(f"{t} has no managed-ledger znode at {path}")
            data, stat = got
            if await zk.kv.set(path, without_ledgers(data, ids), stat.version) is None:
                continue  # written in between
            # Loading the topic again (internalStats does) makes the broker read the edited list.
            now_listed = set(ml_ledger_ids(await admin.internal_stats(t)))
            if not ids & now_listed:
                break
        else:
            raise AssertionError(f"{t} still lists {sorted(ids)} after {ATTEMPTS} edits")

        after = await zk.kv.get(path)
        assert after is not None and not ids & set(parse_managed_ledger_info(after[0]).ledger_ids)
        missing = await _missing_in_bookkeeper(zk, ids)
        assert not missing, f"ledgers {missing} vanished from BookKeeper: they would not be orphans"
    return sorted(ids)


def with_offload_fields(
    data: bytes, ids: Iterable[int], *, bookkeeper_deleted: bool = False, timestamp_ms: int | None = None
) -> bytes:
    """``data`` (a ManagedLedgerInfo) with the offload context of each LedgerInfo of ``ids`` marked
    ``bookkeeperDeleted`` and/or given the offload time ``timestamp_ms``, every other byte as written. The
    fields are rewritten inside the one OffloadContext the LedgerInfo has: a second one appended would be merged
    by protobuf-java (Pulsar 4.0) but replace the first under LightProto (Pulsar 5.0), losing the uuid and the
    completion flag."""
    from worker.formats.protobuf_wire import as_bytes, as_int, fields

    marked = set(ids)
    set_ctx: dict[int, bytes] = {}  # OffloadContext: bookkeeperDeleted is its field 4, timestamp its field 5 (varints)
    if bookkeeper_deleted:
        set_ctx[4] = encode_varint(4 << 3) + encode_varint(1)
    if timestamp_ms is not None:
        set_ctx[5] = encode_varint(5 << 3) + encode_varint(timestamp_ms)
    out = bytearray()
    for f in fields(data):
        raw = data[f.start : f.end]
        if f.number == 1:
            info = as_bytes(f)
            if next(as_int(g) for g in fields(info) if g.number == 1) in marked:
                ctx = next((as_bytes(g) for g in fields(info) if g.number == 5), b"")  # LedgerInfo.offloadContext
                raw = _length_delimited(1, _with_fields(info, {5: _length_delimited(5, _with_fields(ctx, set_ctx))}))
        out += raw
    return bytes(out)


def _with_fields(message: bytes, encoded: dict[int, bytes]) -> bytes:
    """``message`` with each field number of ``encoded`` written once as given, in the place of its first
    occurrence (appended when it had none), every other field as it was."""
    from worker.formats.protobuf_wire import fields

    out, done = bytearray(), set()
    for f in fields(message):
        if f.number in encoded:
            if f.number not in done:
                out += encoded[f.number]
                done.add(f.number)
            continue
        out += message[f.start : f.end]
    for number, enc in encoded.items():
        if number not in done:
            out += enc
    return bytes(out)


def _length_delimited(number: int, body: bytes) -> bytes:
    return encode_varint(number << 3 | 2) + encode_varint(len(body)) + body


async def edit_offload(
    admin: StagingAdmin,
    zk_hosts: str,
    topic: TopicName | str,
    ids: Iterable[int],
    *,
    bookkeeper_deleted: bool = False,
    timestamp_ms: int | None = None,
) -> None:
    """Edit the offload contexts of ``ids`` in the topic's metadata (:func:`with_offload_fields`) while it is
    unloaded, then load it again. ``bookkeeper_deleted``: what a broker that died between its two steps leaves
    of an offloaded ledger (the metadata marks the BookKeeper copy deleted, the broker's first step after its
    offload deletion lag; BookKeeper still holds it). ``timestamp_ms``: an offload made that long ago."""
    t = TopicName.parse(str(topic))
    ids = set(ids)
    path = managed_ledger_path(t)
    async with Stores(f"zk:{zk_hosts}") as zk:
        for _ in range(ATTEMPTS):
            await admin.unload(t)
            got = await zk.kv.get(path)
            if got is None:
                raise AssertionError(f"{t} has no managed-ledger znode at {path}")
            data, stat = got
            edited = with_offload_fields(data, ids, bookkeeper_deleted=bookkeeper_deleted, timestamp_ms=timestamp_ms)
            if await zk.kv.set(path, edited, stat.version) is None:
                continue  # written in between
            await admin.internal_stats(t)  # loaded again: the broker reads the edited record
            after = await zk.kv.get(path)
            assert after is not None
            info = parse_managed_ledger_info(after[0])
            offloads = [ld.offload if (ld := info.ledger(i)) is not None else None for i in ids]
            if all(
                o is not None
                and (o.bookkeeper_deleted or not bookkeeper_deleted)
                and (timestamp_ms is None or o.timestamp == timestamp_ms)
                for o in offloads
            ):
                return
        raise AssertionError(f"{t}: the offloads of {sorted(ids)} not edited after {ATTEMPTS} attempts")


async def _delete_recursive(zk: Stores, path: str) -> None:
    for _ in range(ATTEMPTS):
        try:
            kv: Any = zk.kv  # ZooKeeper's: kazoo's recursive delete
            await kv.run(kv.client.delete, path, recursive=True)
            return
        except NoNodeError:
            return
        except NotEmptyError:
            await asyncio.sleep(0.2)  # a child appeared between listing and deleting: list again
    raise AssertionError(f"could not delete {path}: children keep appearing")


def _shape(stats: dict[str, Any]) -> tuple[object, ...]:
    cursors = stats.get("cursors") or {}
    return (
        tuple(ml_ledger_ids(stats)),
        tuple(sorted((n, c.get("cursorLedger"), c.get("markDeletePosition")) for n, c in cursors.items())),
    )


async def quiesce(admin: StagingAdmin, t: TopicName, *, interval: float = 0.5, timeout: float = 30.0) -> None:
    """Wait until the topic's ledgers and cursors stop changing.

    Acknowledgements land after the consumer that sent them is gone, and each persisted mark-delete may
    roll the cursor ledger (5 entries per cursor ledger here): create the new one, point the cursor znode
    at it, delete the old one. Reading ids in the middle of that would report a ledger the broker is about
    to delete, and miss the one it keeps.
    """
    previous = _shape(await admin.internal_stats(t))

    async def settled() -> bool:
        nonlocal previous
        await asyncio.sleep(interval)
        current = _shape(await admin.internal_stats(t))
        same, previous = current == previous, current
        return same

    await eventually(settled, timeout=timeout, interval=0, what=f"{t} to settle")


async def _delete_one_topic(admin: StagingAdmin, zk: Stores, t: TopicName) -> set[int]:
    # internalStats loads the topic if it was not, so that the unload below runs against deleted znodes
    # (see the module docstring); quiescing first makes the ids read from the znodes the final ones.
    await quiesce(admin, t)
    md = await zk.pulsar.stored_topic(t)
    if md is None:
        raise AssertionError(f"{t} has no managed-ledger znode")
    # The znode lists the current ledger too: the broker writes it when it creates a ledger.
    ids = set(md.ledger_ids) | set(md.cursor_ledger_ids.values())

    # Metadata first, unload second: a graceful unload of an intact topic deletes its cursor ledgers,
    # which would leave nothing to find for the scanner's cursor-ledger path.
    await _delete_recursive(zk, managed_ledger_path(t))
    try:
        await admin.unload(t)
    except TopicNotFound:
        pass  # not loaded after all: nothing in memory to drop
    return ids


async def delete_topic_metadata_keep_ledgers(admin: StagingAdmin, zk_hosts: str, topic: TopicName | str) -> list[int]:
    """Make the topic cease to exist while its ledgers (data and cursor ledgers) stay in BookKeeper.

    A partitioned topic named by its base name loses every partition and its partitioned metadata. Schema
    ledgers are left referenced: schemas are keyed by the base name in ``/schemas`` and not removed here.
    Returns the orphaned ledger ids.
    """
    t = TopicName.parse(str(topic))
    partitions = 0 if t.partition_index is not None else await partition_count(admin, t)
    members = [t.partition(i) for i in range(partitions)] if partitions else [t]
    ids: set[int] = set()
    async with Stores(f"zk:{zk_hosts}") as zk:
        for m in members:
            ids |= await _delete_one_topic(admin, zk, m)
        if partitions:
            await _delete_recursive(zk, partitioned_metadata_path(t))

        for m in members:
            assert await zk.kv.get(managed_ledger_path(m)) is None, f"the broker re-created {m}'s znode"

        async def gone() -> bool:
            for m in members:
                try:
                    await admin.internal_stats(m)
                    return False
                except TopicNotFound:
                    pass
            listed = set(await admin.list_topics(t.namespace_name))
            if listed & {str(m) for m in members}:
                return False
            return not partitions or await partition_count(admin, t) == 0

        await eventually(gone, timeout=30, what=f"{t} to be gone")
        missing = await _missing_in_bookkeeper(zk, ids)
        assert not missing, f"ledgers {missing} vanished from BookKeeper: they would not be orphans"
    return sorted(ids)
