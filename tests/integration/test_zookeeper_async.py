"""The ZooKeeper provider (``worker.backends.zookeeper``) against the real ZooKeeper of the local stack: the
key-value store both roles are written over, opened through the store seam by its URL
(``worker.backends.stores``), and the kazoo-to-asyncio bridge under it (``KazooCalls.call``: kazoo's own
callback completes an asyncio future, no executor thread per call)."""

from __future__ import annotations

import asyncio
import threading

import pytest
from kazoo.exceptions import NoNodeError

from testkit.harness import create_ledgers, pulsar_ml_metadata
from tests.conftest import Stack
from worker.backends.bookkeeper_store import MULTI_READ_MAX, LedgerMetadataChanged
from worker.backends.ledger_listing import LedgerWalk, ledger_subtrees, read_subtrees
from worker.backends.stores import Stores
from worker.core.dispatch import Dispatch
from worker.core.metadata_stores import ChangedRecord
from worker.errors import BackendError

pytestmark = pytest.mark.integration


async def test_many_concurrent_calls_answer_each_caller_without_a_thread_per_call(stack: Stack, unique: str) -> None:
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        base = f"/ldw-test-async-{unique}"
        await zk.kv.run(zk.kv.client.ensure_path, base)
        try:
            for i in range(50):
                await zk.kv.run(zk.kv.client.create, f"{base}/n{i}", str(i).encode())
            threads_before = threading.active_count()
            got = await asyncio.gather(*(zk.kv.get(f"{base}/n{i}") for i in range(50)), zk.kv.get(f"{base}/missing"))
            assert [g[0] if g else None for g in got] == [str(i).encode() for i in range(50)] + [None]
            assert threading.active_count() == threads_before  # no executor threads were started
            assert await zk.kv.exists(f"{base}/missing") is None
            # Semantic answers stay themselves; callers decide what they mean.
            with pytest.raises(NoNodeError):
                await zk.kv.calls.call(zk.kv.client.delete_async, f"{base}/missing")
        finally:
            await zk.kv.run(zk.kv.client.delete, base, recursive=True)


async def test_versioned_delete_meeting_a_metadata_change_deletes_nothing(stack: Stack) -> None:
    """The ZooKeeper route deletes exactly the metadata version it verified: a change in between (a
    ledger being closed, recovered, re-replicated) makes the delete fail, and the ledger stays."""
    [lid] = create_ledgers(stack, 1, pulsar_ml_metadata("persistent://public/default/ldw-async-race"))
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        store = zk.bookkeeper
        got = await store.read(lid)
        assert got is not None
        _md, token = got
        path = await zk.bookkeeper.ledger_path(lid)
        data, _stat = await zk.kv.run(zk.kv.client.get, path)
        await zk.kv.run(zk.kv.client.set, path, data)  # same bytes, new version: what a concurrent writer does
        with pytest.raises(LedgerMetadataChanged):
            await store.delete(lid, token)
        assert await zk.bookkeeper.ledger_metadata_exists(lid)
        # Read again, verified again: now the delete goes through, and a second one finds it gone.
        got = await store.read(lid)
        assert got is not None
        assert await store.delete(lid, got[1]) is True
        assert await store.delete(lid, got[1]) is False
        assert not await zk.bookkeeper.ledger_metadata_exists(lid)


async def test_a_lost_connection_is_a_backend_error_not_a_stuck_task(stack: Stack) -> None:
    zk = Stores(f"zk:{stack.zookeeper_hosts}", timeout_s=2)
    await zk.start()
    await zk.close()
    with pytest.raises(BackendError):
        await asyncio.wait_for(zk.kv.get("/ledgers/LAYOUT"), 10)


async def test_concurrent_deletes_go_out_as_one_multi_and_a_stale_one_holds_back_no_other(stack: Stack) -> None:
    """Deletes made while one is in flight are sent together as one ZooKeeper multi of versioned deletes.
    When one ledger changed since it was read, ZooKeeper refuses the whole multi; the store then deletes
    them one by one: every other ledger is deleted, the changed one is not, and its caller is told."""
    topic = "persistent://public/default/ldw-async-multi"
    ids = create_ledgers(stack, 8, pulsar_ml_metadata(topic))
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        store = zk.bookkeeper
        tokens = {}
        for lid in ids:
            got = await store.read(lid)
            assert got is not None
            tokens[lid] = got[1]
        first, stale, rest = ids[0], ids[1], ids[2:5]
        path = await zk.bookkeeper.ledger_path(stale)
        data, _stat = await zk.kv.run(zk.kv.client.get, path)
        await zk.kv.run(zk.kv.client.set, path, data)  # a concurrent writer: a new version

        # Made together, they go out as one batch: one multi, refused, then single deletes.
        answers = await asyncio.gather(
            *(store.delete(lid, tokens[lid]) for lid in [first, stale, *rest]), return_exceptions=True
        )
        assert answers[0] is True and answers[2:] == [True] * len(rest)
        assert isinstance(answers[1], LedgerMetadataChanged)
        assert await zk.bookkeeper.ledger_metadata_exists(stale)
        assert not any([await zk.bookkeeper.ledger_metadata_exists(lid) for lid in [first, *rest]])
        assert store.deletes.batches == 1

        # Without a stale one the multi itself is taken: no single delete is made.
        singles: list[int] = []
        single = zk.bookkeeper.delete_ledger_metadata

        async def counted(ledger_id: int, *, expected_version: int | None = None) -> bool:
            singles.append(ledger_id)
            return await single(ledger_id, expected_version=expected_version)

        zk.bookkeeper.delete_ledger_metadata = counted  # type: ignore[method-assign]
        last = ids[5:]
        before = store.deletes.batches
        answers = await asyncio.gather(*(store.delete(lid, tokens[lid]) for lid in last))
        assert answers == [True] * len(last)
        assert store.deletes.batches == before + 1 and singles == []
        assert not any([await zk.bookkeeper.ledger_metadata_exists(lid) for lid in last])
        got = await store.read(stale)
        assert got is not None and await store.delete(stale, got[1]) is True


async def test_concurrent_ledger_reads_go_out_as_one_multi_read_each_answered_alone(stack: Stack) -> None:
    """Ledger-metadata reads made together are one ZooKeeper multiRead: each ledger gets its own bytes and
    version, a missing ledger is None (not an error for the others), and the answers equal single reads."""
    ids = create_ledgers(stack, 6, pulsar_ml_metadata("persistent://public/default/ldw-async-multi-read"))
    missing = max(ids) + 10**9
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        alone = [await zk.kv.get(await zk.bookkeeper.ledger_path(lid)) for lid in ids]
        before = zk.bookkeeper._metadata_reads.batches
        together = await asyncio.gather(*(zk.bookkeeper.read_ledger_metadata(lid) for lid in [*ids, missing]))
        # Asked in one turn of the event loop, the seven are one batch, sent as one multiRead.
        assert zk.bookkeeper._metadata_reads.batches == before + 1 and zk.kv._multi_read
        assert together[-1] is None
        assert all(a is not None for a in alone)
        assert [(d, s.version, s.ctime) for d, s in together[:-1]] == [  # type: ignore[misc]
            (d, s.version, s.ctime) for d, s in alone
        ]  # fmt: skip
        # A znode changed in between is read at its new version: the multiRead reads now, not a cache.
        path = await zk.bookkeeper.ledger_path(ids[0])
        await zk.kv.run(zk.kv.client.set, path, alone[0][0])  # type: ignore[index]
        again = await asyncio.gather(*(zk.bookkeeper.read_ledger_metadata(lid) for lid in ids[:3]))
        assert again[0] is not None and again[0][1].version == alone[0][1].version + 1  # type: ignore[index]


async def test_a_batch_read_answers_in_order_and_a_prefetched_znode_is_given_once(stack: Stack) -> None:
    # The daemon's sweep reads a whole batch's ledgers at once (more than one multiRead's worth here), and
    # hands each message the znode it read; a second reader of the same ledger (a duplicate, after the
    # first one's delete) reads for itself.
    ids = create_ledgers(stack, 3, pulsar_ml_metadata("persistent://public/default/ldw-async-batch-read"))
    missing = [max(ids) + 10**9 + i for i in range(MULTI_READ_MAX + 2)]
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        answers = await zk.bookkeeper.read_ledgers_metadata([ids[0], *missing, ids[1], ids[2]])
        assert answers[1:-2] == [None] * len(missing)
        present = [answers[0], answers[-2], answers[-1]]
        assert all(isinstance(a, tuple) for a in present)
        assert [a[1].version for a in present] == [  # type: ignore[index]
            (await zk.kv.get(await zk.bookkeeper.ledger_path(lid)))[1].version  # type: ignore[index]
            for lid in ids
        ]

        # A message's inspection takes its batch's read (the daemon's Dispatch), once.
        dispatch = Dispatch(0.0, {ids[0]: present[0]})  # type: ignore[dict-item]
        store = zk.bookkeeper
        before = zk.bookkeeper._metadata_reads.batches
        got = await store.read(ids[0], dispatch.take(ids[0]))  # the batch's read, not a new one
        assert got is not None and got[1] == present[0][1].version  # type: ignore[index]
        assert zk.bookkeeper._metadata_reads.batches == before and dispatch.reads == {}
        # Deleted since: the next reader sees it gone, not the batch's read.
        await zk.bookkeeper.delete_ledger_metadata(ids[0])
        assert await store.read(ids[0], dispatch.take(ids[0])) is None
        assert zk.bookkeeper._metadata_reads.batches == before + 1


async def test_the_key_value_seam_on_zookeeper(stack: Stack, unique: str) -> None:
    """What both roles use of a store, and nothing else: reads (one, many, children), an absence confirmed
    after a sync, versioned writes and deletes (one, many: all or none), the latency of each kind."""
    async with Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        kv = zk.kv
        base = f"/ldw-test-kv-{unique}"
        await kv.run(kv.client.ensure_path, base)  # type: ignore[attr-defined]
        try:
            for i in range(3):
                await kv.run(kv.client.create, f"{base}/n{i}", str(i).encode())  # type: ignore[attr-defined]
            kv.drain_latency()
            assert sorted(await kv.children(base) or []) == ["n0", "n1", "n2"]
            assert await kv.children(f"{base}/missing") is None
            many = await kv.get_many([f"{base}/n0", f"{base}/missing", f"{base}/n2"])
            assert [m[0] if isinstance(m, tuple) else m for m in many] == [b"0", None, b"2"]
            assert await kv.exists_confirmed(f"{base}/missing") is None
            stat = await kv.exists(f"{base}/n0")
            assert stat is not None
            assert await kv.set(f"{base}/n0", b"zero", stat.version) == stat.version + 1
            assert await kv.set(f"{base}/n0", b"stale", stat.version) is None  # changed since: nothing written
            with pytest.raises(ChangedRecord):
                await kv.delete(f"{base}/n0", stat.version)
            assert await kv.delete(f"{base}/n0", stat.version + 1) is True
            assert await kv.delete(f"{base}/n0", stat.version + 1) is False  # gone already
            # All or none: one stale version refuses the whole multi.
            assert await kv.delete_many([(f"{base}/n1", 0), (f"{base}/n2", 5)]) is False
            assert await kv.get(f"{base}/n1") is not None
            assert await kv.delete_many([(f"{base}/n1", 0), (f"{base}/n2", 0)]) is True
            assert await kv.children(base) == []
            latency = kv.drain_latency()
            assert latency.get("read") and latency.get("write")
        finally:
            await kv.run(kv.client.delete, base, recursive=True)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "uri",
    ["zk+hierarchical://{zk}/ledgers", "zk://{zk}/ledgers", "metadata-store:zk:{zk}/ledgers"],
)
async def test_the_ledger_walk_through_the_seam(stack: Stack, uri: str) -> None:
    """BookKeeper's ledgers walked subtree by subtree through its role, in every spelling of its URL, from
    asyncio (``scan``) and from code without a loop (the audit's Spark executors)."""
    ids = create_ledgers(stack, 3, pulsar_ml_metadata("persistent://public/default/ldw-walk"))
    uri = uri.format(zk=stack.zookeeper_hosts)
    async with Stores(f"zk:{stack.zookeeper_hosts}", uri) as zk:
        walked = {md.ledger_id async for chunk in LedgerWalk(zk.bookkeeper).chunks() for md in chunk}
    assert set(ids) <= walked
    rows = read_subtrees(uri, ledger_subtrees(uri))
    assert set(ids) <= {lid for lid, _, _ in rows}


class CuttableProxy:
    """A TCP proxy to ZooKeeper on loopback that can be cut: its listener closed and every connection dropped,
    so the client sees ZooKeeper go away (refused reconnects) while the real one keeps serving the others."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self.server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def cut(self) -> None:
        assert self.server is not None
        self.server.close()
        for w in self.writers:
            w.transport.abort()
        await self.server.wait_closed()


@pytest.mark.timeout(120, method="thread")  # a blocked loop cannot time itself out: the thread method ends it
async def test_calls_while_zookeeper_is_away_fail_at_once_and_never_block_the_loop(stack: Stack) -> None:
    """kazoo queues a call made while its session reconnects and wakes its connection thread through a blocking
    socket that nobody reads meanwhile: a few hundred calls filled it and blocked the event loop (and SIGTERM)
    until ZooKeeper came back. Such calls fail at once, as transient errors, and the loop keeps running."""
    proxy = CuttableProxy(int(stack.zookeeper_hosts.rsplit(":", 1)[1]))
    port = await proxy.start()
    async with Stores(f"zk:127.0.0.1:{port}") as zk:
        assert await zk.kv.exists("/") is not None
        await proxy.cut()
        for _ in range(100):  # the client notices the cut
            if not zk.kv.client.connected:
                break
            await asyncio.sleep(0.1)
        assert not zk.kv.client.connected
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.ensure_future(ticker())
        try:
            started = asyncio.get_running_loop().time()
            # As a busy worker calls: thousands at once, far more than the wake socket's buffer holds.
            got = await asyncio.gather(*(zk.kv.get("/ledgers") for _ in range(3000)), return_exceptions=True)
            assert all(isinstance(g, BackendError) and "not connected" in str(g) for g in got), got[:3]
            assert asyncio.get_running_loop().time() - started < 30
            await asyncio.sleep(0.05)
            assert ticks > 0, "the event loop stood still"
        finally:
            t.cancel()
