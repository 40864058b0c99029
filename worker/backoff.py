"""How long a failed attempt waits before the retry topic delivers it again."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Backoff:
    initial_s: float
    max_s: float
    multiplier: float = 2.0
    jitter: float = 0.1  # +-10%: replicas that failed together should not retry in lockstep

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Delay after failed attempt number ``attempt`` (1-based), capped at ``max_s``."""
        if attempt < 1:
            raise ValueError("attempt is 1-based")
        base = min(self.max_s, self.initial_s * self.multiplier ** (attempt - 1))
        if self.jitter and base > 0:
            r = (rng or random).uniform(-self.jitter, self.jitter)
            base = min(self.max_s, max(0.0, base * (1 + r)))
        return base
