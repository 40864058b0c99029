"""Token bucket on storage deletes, with an injected clock: a burst, then ``rate`` per second."""

from __future__ import annotations

import asyncio

import pytest

from worker.daemon import rate_limit
from worker.daemon.rate_limit import TokenBucket


class FakeClock:
    def __init__(self, t: float = 1000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, dt: float) -> None:
        self.t += dt


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1, 1), (1, 0), (1, -3)])
def test_bad_parameters(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, burst, clock=FakeClock())


def test_burst_then_rate() -> None:
    clock = FakeClock()
    b = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [b.try_acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    # Empty: the next token comes in 1/rate seconds.
    assert b.try_acquire() == pytest.approx(0.5)
    clock.advance(0.25)
    assert b.try_acquire() == pytest.approx(0.25)
    clock.advance(0.25)
    assert b.try_acquire() == 0.0
    assert b.try_acquire() == pytest.approx(0.5)


def test_a_refused_acquire_takes_nothing() -> None:
    clock = FakeClock()
    b = TokenBucket(rate=1.0, burst=1, clock=clock)
    assert b.try_acquire() == 0.0
    for _ in range(5):
        assert b.try_acquire() == pytest.approx(1.0)
    clock.advance(1.0)
    assert b.try_acquire() == 0.0


def test_refill_is_capped_at_burst() -> None:
    clock = FakeClock()
    b = TokenBucket(rate=10.0, burst=2, clock=clock)
    b.try_acquire()
    b.try_acquire()
    clock.advance(3600)  # an idle hour does not bank 36000 tokens
    assert [b.try_acquire() for _ in range(2)] == [0.0, 0.0]
    assert b.try_acquire() > 0


def test_steady_rate_over_time() -> None:
    clock = FakeClock()
    b = TokenBucket(rate=4.0, burst=1, clock=clock)
    granted = 0
    for _ in range(640):  # 10 simulated seconds in steps of 1/64 s (exact in binary floating point)
        if b.try_acquire() == 0.0:
            granted += 1
        clock.advance(1 / 64)
    assert granted == 40  # the burst at t=0, then one every 1/4 s


def test_fractional_rate() -> None:
    clock = FakeClock()
    b = TokenBucket(rate=0.5, burst=1, clock=clock)
    assert b.try_acquire() == 0.0
    assert b.try_acquire() == pytest.approx(2.0)
    clock.advance(1.9)
    assert b.try_acquire() == pytest.approx(0.1)


async def test_acquire_waits_for_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    slept: list[float] = []
    real_sleep = asyncio.sleep

    async def fake_sleep(dt: float) -> None:
        slept.append(dt)
        clock.advance(dt)
        await real_sleep(0)

    b = TokenBucket(rate=4.0, burst=2, clock=clock)
    monkeypatch.setattr(rate_limit.asyncio, "sleep", fake_sleep)
    for _ in range(6):
        await b.acquire()
    monkeypatch.undo()
    # Two from the burst at once, then four waits of 1/rate.
    assert slept == pytest.approx([0.25] * 4)
    assert clock.t == pytest.approx(1001.0)


async def test_concurrent_acquirers_are_served_one_token_each(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    real_sleep = asyncio.sleep
    order: list[int] = []

    async def fake_sleep(dt: float) -> None:
        clock.advance(dt)
        await real_sleep(0)

    b = TokenBucket(rate=10.0, burst=1, clock=clock)
    monkeypatch.setattr(rate_limit.asyncio, "sleep", fake_sleep)

    async def worker(i: int) -> None:
        await b.acquire()
        order.append(i)

    await asyncio.gather(*(worker(i) for i in range(5)))
    monkeypatch.undo()
    assert sorted(order) == list(range(5))
    # 1 burst + 4 more at 10/s: 0.4 simulated seconds, not less (no token handed out twice).
    assert clock.t == pytest.approx(1000.4)


async def test_it_counts_the_tokens_taken_and_the_callers_waiting() -> None:
    # What the pace reads to know whether anything is being paced (worker.core.pace).
    clock = FakeClock()
    b = TokenBucket(rate=10.0, burst=2, clock=clock)
    assert (b.taken, b.waiting) == (0, 0)
    await b.acquire()
    await b.acquire()
    assert b.try_acquire() > 0  # a refused token is not taken
    assert (b.taken, b.waiting) == (2, 0)
    waiter = asyncio.create_task(b.acquire())  # the clock stands still: it waits
    await asyncio.sleep(0.01)
    assert (b.taken, b.waiting) == (2, 1)
    clock.advance(0.1)
    await asyncio.wait_for(waiter, timeout=5)
    assert (b.taken, b.waiting) == (3, 0)
