"""How long a failed attempt waits before the retry topic delivers it again."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float
    max_s: float
    multiplier: float = 2.0
    jitter: float = 0.1  # +-10%: replicas that failed together should not retry in lockstep

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay after failed attempt number ``attempt`` (1-based), capped at ``max_s``.

        Total for every attempt number: the number comes from a message property, so it can be anything,
        and ``2.0 ** 1025`` overflows a float. The power is only computed below the attempt where the cap
        takes over."""
        if attempt < 1:
            raise ValueError("attempt is 1-based")
        base = self._base(attempt - 1)
        if self.jitter and base > 0:
            r = (rng or random).uniform(-self.jitter, self.jitter)
            base = min(self.max_s, max(0.0, base * (1 + r)))
        return base

    def _base(self, n: int) -> float:
        if self.initial_s <= 0 or self.max_s <= 0:
            return max(0.0, min(self.max_s, self.initial_s))
        if self.multiplier <= 1 or self.max_s <= self.initial_s:
            return min(self.max_s, self.initial_s)
        # initial * multiplier ** n reaches max_s at n = log(max/initial, multiplier); from there on it
        # is the cap, and below it the power is smaller than max/initial, hence finite.
        if n >= math.log(self.max_s / self.initial_s, self.multiplier):
            return self.max_s
        try:
            return min(self.max_s, self.initial_s * self.multiplier**n)
        except OverflowError:  # only with an infinite cap
            return self.max_s
