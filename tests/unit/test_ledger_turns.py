"""One decision at a time per ledger (``worker.daemon.ledger_turns``): turns in arrival order, other
ledgers never wait, and a waiter cancelled before or after its turn came never blocks the rest."""

from __future__ import annotations

import asyncio

import pytest

from worker.daemon.ledger_turns import LedgerTurns


async def _spin() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_turns_on_one_ledger_come_in_order_and_other_ledgers_never_wait() -> None:
    turns = LedgerTurns()
    order: list[str] = []
    gate = asyncio.Event()

    async def decide(name: str, key: int) -> None:
        await turns.take(key)
        try:
            order.append(f"{name} starts")
            await gate.wait()
            order.append(f"{name} ends")
        finally:
            turns.done(key)

    tasks = [asyncio.create_task(decide(n, k)) for n, k in (("a", 1), ("b", 1), ("c", 2), ("d", 1))]
    await _spin()
    assert order == ["a starts", "c starts"]  # b and d wait for a; c's ledger is another one
    gate.set()
    await asyncio.gather(*tasks)
    assert order == ["a starts", "c starts", "a ends", "c ends", "b starts", "b ends", "d starts", "d ends"]
    assert len(turns) == 0


@pytest.mark.parametrize("turn_came_first", [False, True], ids=["cancelled-before-its-turn", "cancelled-after"])
async def test_a_cancelled_waiter_never_blocks_the_next(turn_came_first: bool) -> None:
    # Cancelled before its turn came, the waiter is skipped; after (its turn began, but it had not run
    # yet), it hands the turn on.
    turns = LedgerTurns()
    await turns.take(7)
    waiter = asyncio.create_task(turns.take(7))
    after = asyncio.create_task(turns.take(7))
    await _spin()
    if turn_came_first:
        turns.done(7)
        waiter.cancel()
    else:
        waiter.cancel()
        await _spin()
        turns.done(7)
    await asyncio.wait_for(after, 1)  # the cancelled waiter did not take the turn with it
    assert waiter.cancelled()
    turns.done(7)
    assert len(turns) == 0


async def test_a_cancelled_waiter_already_skipped_does_not_fail_its_cancellation() -> None:
    turns = LedgerTurns()
    await turns.take(7)
    waiter = asyncio.create_task(turns.take(7))
    await _spin()
    waiter.cancel()
    turns.done(7)  # skips the cancelled waiter before its task has run; the ledger is free again
    await _spin()
    assert waiter.cancelled() and len(turns) == 0
