"""Group commit (``worker.backends.group_commit``), fresh shared reads (``worker.backends.single_flight_reads``) and
the loop hand-off: the batching rules of the hot path, as pure asyncio."""

from __future__ import annotations

import asyncio
import threading

import pytest

from worker.backends.group_commit import GroupCommit
from worker.backends.loop_handoff import LoopHandoff
from worker.backends.single_flight_reads import SingleFlightReads


async def test_requests_made_while_a_batch_is_in_flight_go_out_together_in_the_next() -> None:
    sent: list[list[int]] = []
    gate = asyncio.Event()

    async def commit(items: list[int]) -> list[int | BaseException]:
        sent.append(items)
        await gate.wait()
        return [i * 10 for i in items]

    g: GroupCommit[int, int] = GroupCommit(commit, max_batch=3)
    first = asyncio.ensure_future(g.submit(1))
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    rest = [asyncio.ensure_future(g.submit(i)) for i in range(2, 7)]
    await asyncio.sleep(0)
    gate.set()
    assert await first == 10
    assert await asyncio.gather(*rest) == [20, 30, 40, 50, 60]
    assert sent == [[1], [2, 3, 4], [5, 6]]  # no batch over max_batch, order kept
    assert g.batches == 3


async def test_each_request_hears_only_its_own_failure_and_a_failed_batch_fails_all_of_it() -> None:
    async def commit(items: list[int]) -> list[int | BaseException]:
        if 99 in items:
            raise OSError("storage down")
        return [ValueError(f"bad {i}") if i % 2 else i for i in items]

    g: GroupCommit[int, int] = GroupCommit(commit, max_batch=10)
    got = await asyncio.gather(*(g.submit(i) for i in range(4)), return_exceptions=True)
    assert got[0] == 0 and got[2] == 2
    assert isinstance(got[1], ValueError) and str(got[1]) == "bad 1" and isinstance(got[3], ValueError)
    got = await asyncio.gather(g.submit(98), g.submit(99), return_exceptions=True)
    assert all(isinstance(x, OSError) for x in got)
    assert await g.submit(4) == 4  # and the group keeps working


async def test_a_caller_that_gives_up_does_not_break_the_batch() -> None:
    gate = asyncio.Event()

    async def commit(items: list[int]) -> list[int | BaseException]:
        await gate.wait()
        return list(items)

    g: GroupCommit[int, int] = GroupCommit(commit, max_batch=10)
    a = asyncio.ensure_future(g.submit(1))
    b = asyncio.ensure_future(g.submit(2))
    await asyncio.sleep(0)
    a.cancel()
    gate.set()
    assert await b == 2
    with pytest.raises(asyncio.CancelledError):
        await a


def test_a_batch_larger_than_zero_is_required() -> None:
    async def commit(items: list[int]) -> list[int | BaseException]:
        return list(items)

    with pytest.raises(ValueError):
        GroupCommit(commit, max_batch=0)


async def test_a_read_is_shared_only_with_messages_received_before_it_started() -> None:
    reads = 0

    async def load() -> int:
        nonlocal reads
        reads += 1
        await asyncio.sleep(0.01)
        return reads

    fresh: SingleFlightReads[int] = SingleFlightReads()
    loop = asyncio.get_running_loop()
    # One batch, one instant: three askers, one read.
    since = loop.time()
    assert await asyncio.gather(*(fresh.read("k", load, since) for _ in range(3))) == [1, 1, 1]
    assert reads == 1 and fresh.shared == 2
    # A message received after that read started must not get it: it reads again.
    assert await fresh.read("k", load, loop.time()) == 2
    # Outside the daemon (no instant) every read is its own.
    assert await fresh.read("k", load) == 3


async def test_a_failed_read_is_never_given_to_a_later_asker() -> None:
    calls = 0

    async def load() -> int:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise OSError("connection lost")
        return calls

    fresh: SingleFlightReads[int] = SingleFlightReads()
    since = asyncio.get_running_loop().time() - 1
    with pytest.raises(OSError):
        await fresh.read("k", load, since)
    assert await fresh.read("k", load, since) == 2


async def test_answers_from_other_threads_reach_the_loop_in_order_in_one_wakeup() -> None:
    loop = asyncio.get_running_loop()
    handoff = LoopHandoff(loop)
    got: list[int] = []
    done = asyncio.Event()

    def put(x: int) -> None:
        got.append(x)
        if len(got) == 100:
            done.set()

    def producer() -> None:
        for i in range(100):
            handoff.call(put, i)

    t = threading.Thread(target=producer)
    t.start()
    t.join()
    await asyncio.wait_for(done.wait(), 5)
    assert got == list(range(100))
