"""Backoff of the retry topic: exponential, capped, jittered within bounds, 1-based."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.core.backoff import Backoff


def test_exponential_without_jitter() -> None:
    b = Backoff(initial_s=60, max_s=3600, multiplier=2, jitter=0)
    assert [b.delay(n) for n in range(1, 8)] == [60, 120, 240, 480, 960, 1920, 3600]


def test_capped_forever() -> None:
    b = Backoff(initial_s=1, max_s=10, multiplier=3, jitter=0)
    assert b.delay(3) == 9
    assert b.delay(4) == 10
    assert b.delay(1000) == 10  # no overflow for huge attempt numbers


def test_multiplier_one_is_constant() -> None:
    b = Backoff(initial_s=5, max_s=100, multiplier=1, jitter=0)
    assert {b.delay(n) for n in range(1, 20)} == {5}


def test_zero_initial_is_zero() -> None:
    b = Backoff(initial_s=0, max_s=100)
    assert b.delay(1) == 0
    assert b.delay(5) == 0


@pytest.mark.parametrize("attempt", [0, -1, -100])
def test_attempt_is_one_based(attempt: int) -> None:
    with pytest.raises(ValueError):
        Backoff(1, 10).delay(attempt)


@given(
    st.floats(0.001, 1000),
    st.floats(1, 4),
    st.integers(1, 60),
    st.floats(0, 0.5),
    st.integers(0, 2**32),
)
def test_jitter_bounds(initial: float, multiplier: float, attempt: int, jitter: float, seed: int) -> None:
    max_s = initial * 50
    b = Backoff(initial, max_s, multiplier, jitter)
    base = min(max_s, initial * multiplier ** (attempt - 1))
    d = b.delay(attempt, random.Random(seed))
    assert base * (1 - jitter) - 1e-9 <= d <= min(max_s, base * (1 + jitter)) + 1e-9
    assert 0 <= d <= max_s


def test_jitter_spreads_replicas() -> None:
    b = Backoff(100, 10_000, jitter=0.1)
    rng = random.Random(7)
    delays = [b.delay(1, rng) for _ in range(200)]
    assert min(delays) < 95 and max(delays) > 105  # not lockstep
    assert all(90 <= d <= 110 for d in delays)


def test_jitter_never_exceeds_the_cap() -> None:
    b = Backoff(100, 100, jitter=0.5)
    rng = random.Random(1)
    assert all(b.delay(5, rng) <= 100 for _ in range(200))


def test_same_seed_same_delay() -> None:
    b = Backoff(10, 1000)
    assert b.delay(3, random.Random(3)) == b.delay(3, random.Random(3))


def test_default_rng_is_used_without_one() -> None:
    b = Backoff(10, 1000, jitter=0.1)
    assert 36 <= b.delay(3) <= 44


# ---- total for any attempt: a message's attempt count is untrusted input --------------------------------


@pytest.mark.parametrize("attempt", [1026, 1100, 5000, 100_001, 2**31, 10**40])
def test_float_multiplier_never_overflows(attempt: int) -> None:
    # Defect: the worker's settings make the multiplier a float, and 2.0 ** 1025 raises OverflowError: a
    # message with RECONSUMETIMES >= ~1026 crashed its settle on every delivery and looped forever.
    b = Backoff(initial_s=60.0, max_s=3600.0, multiplier=2.0, jitter=0)
    assert b.delay(attempt) == 3600.0
    assert 0 <= Backoff(60.0, 3600.0, 2.0).delay(attempt) <= 3600.0


@given(
    st.floats(0, 1e6),
    st.floats(0, 1e6),
    st.floats(1, 1e3),
    st.floats(0, 0.5),
    st.integers(1, 10**60),
)
def test_delay_is_total_and_within_the_cap(
    initial: float, max_s: float, multiplier: float, jitter: float, attempt: int
) -> None:
    d = Backoff(initial, max_s, multiplier, jitter).delay(attempt, random.Random(attempt))
    assert 0 <= d <= max_s


def test_cap_below_initial_is_the_cap() -> None:
    assert Backoff(initial_s=100, max_s=10, multiplier=2.0, jitter=0).delay(1) == 10
    assert Backoff(initial_s=100, max_s=10, multiplier=2.0, jitter=0).delay(10**9) == 10


def test_infinite_cap_does_not_overflow() -> None:
    assert Backoff(initial_s=1.0, max_s=float("inf"), multiplier=2.0, jitter=0).delay(5000) == float("inf")
