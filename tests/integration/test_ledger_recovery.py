"""The worker's recovery of an open ledger (``worker.backends.ledger_recovery``) against real bookies and
BookKeeper's own Java client: a live writer is fenced, and the ledger closes where BookKeeper's recovery
would close it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from testkit.harness import LedgerWriter, create_ledgers, recover_with_bookkeeper
from tests.conftest import Stack
from worker.backends.bookie_http import BookieClient
from worker.backends.ledger_recovery import LedgerRecovery, Unrecoverable
from worker.backends.stores import Stores
from worker.formats import ledger_metadata_record as record

pytestmark = pytest.mark.integration

NOT_PULSAR = {"application": "ldw-recovery-test"}  # no scan or worker of another test takes these for Pulsar's


@pytest.fixture
async def zk(stack: Stack) -> AsyncIterator[Stores]:
    async with Stores(f"zk:{stack.zookeeper_hosts}") as z:
        yield z


async def stored(zk: Stores, ledger_id: int) -> tuple[bytes, int]:
    got = await zk.kv.get(await zk.bookkeeper.ledger_path(ledger_id))
    assert got is not None
    return got[0], int(got[1].version)


async def test_a_live_writer_is_fenced_and_its_ledger_closed_after_its_last_confirmed_add(
    stack: Stack, zk: Stores, bookie: BookieClient
) -> None:
    writer = await asyncio.to_thread(LedgerWriter, stack, NOT_PULSAR)
    try:
        await asyncio.to_thread(writer.wait_until_added, 5)
        before, _ = await stored(zk, writer.ledger_id)
        assert record.decode(before).state == record.OPEN
        done = await LedgerRecovery(zk.bookkeeper, timeout_s=10).recover(writer.ledger_id)
        # The writer's next add fails: the bookie refuses a fenced ledger.
        failure = await asyncio.to_thread(writer.failure)
        assert "Fenced" in failure, writer.lines[-5:]
    finally:
        await asyncio.to_thread(writer.close)
    acknowledged = max(writer.added())
    assert done.closed_here
    # Nothing the writer was told is durable is cut off; an add in flight at the fence may be kept too.
    assert done.last_entry_id in (acknowledged, acknowledged + 1)
    after, version = await stored(zk, writer.ledger_id)
    md = record.decode(after)
    assert (md.state, md.lastEntryId, md.length) == (record.CLOSED, done.last_entry_id, done.length)
    assert version == 2  # OPEN -> IN_RECOVERY -> CLOSED, each a versioned write
    # Every other field is the writer's, byte for byte (the custom metadata, the ensemble, the password).
    reopened = record.decode(before)
    reopened.state, reopened.lastEntryId, reopened.length = md.state, md.lastEntryId, md.length
    assert record.encode(reopened) == after
    # BookKeeper's own client reads the closed ledger to its last entry.
    http_md = await bookie.get_metadata(writer.ledger_id)
    assert http_md is not None and http_md.state == "CLOSED"
    # Recovering it again changes nothing.
    again = await LedgerRecovery(zk.bookkeeper, timeout_s=10).recover(writer.ledger_id)
    assert (again.closed_here, again.last_entry_id, again.length) == (False, done.last_entry_id, done.length)
    assert await stored(zk, writer.ledger_id) == (after, 2)


@pytest.mark.parametrize(
    ("digest", "password", "entries"),
    [("CRC32C", "", 7), ("CRC32C", "", 0), ("CRC32", "", 4), ("MAC", "a-password", 4), ("DUMMY", "", 4)],
)
async def test_it_closes_where_bookkeepers_own_recovery_closes(
    stack: Stack, zk: Stores, digest: str, password: str, entries: int
) -> None:
    # Two writers that died with the same entries written: one ledger recovered by the worker, the other
    # by BookKeeper's recovery open. The last entry (never confirmed by a later add) is found and verified
    # with the ledger's digest in both.
    ours, theirs = await asyncio.to_thread(
        create_ledgers, stack, 2, NOT_PULSAR, entries, leave_open=True, digest=digest, password=password
    )
    done = await LedgerRecovery(zk.bookkeeper, timeout_s=10).recover(ours)
    bk = await asyncio.to_thread(recover_with_bookkeeper, stack, [theirs], digest=digest, password=password)
    assert (done.last_entry_id, done.length) == bk[theirs]
    assert done.last_entry_id == entries - 1


async def test_a_ledger_whose_password_is_not_its_metadatas_cannot_be_recovered(stack: Stack, zk: Stores) -> None:
    # The bookie refuses a master key that is not the writer's: the worker says so and changes nothing
    # more than BookKeeper's recovery would have (the record is IN_RECOVERY, as after a failed recovery).
    [lid] = await asyncio.to_thread(create_ledgers, stack, 1, NOT_PULSAR, 2, leave_open=True, password="right")
    data, version = await stored(zk, lid)
    md = record.decode(data)
    md.password = b"wrong"
    assert await zk.bookkeeper.write_ledger_metadata(lid, record.encode(md), version) is not None
    with pytest.raises(Unrecoverable, match="refused the ledger's master key"):
        await LedgerRecovery(zk.bookkeeper, timeout_s=10).recover(lid)
    data, _ = await stored(zk, lid)
    assert record.decode(data).state == record.IN_RECOVERY
