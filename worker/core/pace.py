"""How fast to delete: paced by the metadata store's health, not a fixed rate.

Every deletion is a write to BookKeeper's metadata store, so the rate follows that store's latency (AIMD:
per kind of call, each interval's p90 against its idle level, the lower quartile over the baseline window).
The rule, its bounds and why an interval without deletes holds the rate: docs/operations.md, "What the worker
does when ZooKeeper is slow". ``last_change`` names the interval that crossed between *slowed* and
*recovered*, once per crossing, not once per step (the counters carry every step).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum


@dataclass(frozen=True, slots=True)
class PaceRules:
    ceiling: float  # deletes per second: worker.deletes_per_second
    floor: float
    latency_factor: float  # back off once p90 > latency_factor x idle level
    baseline_intervals: int = 600  # the idle level's window, in intervals
    baseline_quantile: float = 0.25  # the idle level: this quantile of the window's interval p90s
    min_samples: int = 5
    decrease: float = 0.5
    # The additive step, as a fraction of the ceiling: the ceiling is reached again in twenty calm intervals.
    increase_fraction: float = 0.05
    # The idle level is at least this (seconds): a store answering in microseconds (a loopback test) must not
    # read a 0.3 ms call as three times too slow.
    min_baseline_s: float = 0.001


def quantile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def p90(latencies: Sequence[float]) -> float:
    return quantile(latencies, 0.9)


class PaceChange(Enum):
    SLOWED = "slowed"  # a halving took the pace below its ceiling
    RECOVERED = "recovered"  # back at the ceiling after being slowed


@dataclass
class Pace:
    rules: PaceRules
    rate: float = 0.0
    decreases: int = 0
    # The last interval's worst ratio of a kind's p90 to its idle level (None: no kind had enough calls).
    last_ratio: float | None = None
    # Below the ceiling because of a halving (not merely still climbing from the start), until back at it.
    slowed: bool = False
    # The state change the last interval made, if any: what is worth a log line.
    last_change: PaceChange | None = None
    _p90s: dict[str, deque[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.rate <= 0:
            self.rate = max(self.rules.floor, self.rules.ceiling / 10)

    def baseline_s(self, kind: str) -> float | None:
        """The idle level of ``kind``'s calls (None until an interval had enough of them)."""
        seen = self._p90s.get(kind)
        if not seen:
            return None
        return max(self.rules.min_baseline_s, quantile(seen, self.rules.baseline_quantile))

    def update(self, latencies: Mapping[str, Sequence[float]], *, deletes: int) -> float:
        """The rate after one interval, given each kind's call latencies (seconds) in it and ``deletes``: the
        deletes issued in the interval plus those waiting for a token at its end. With none, the rate holds."""
        r = self.rules
        self.last_change = None
        ratios: list[float] = []
        for kind, lats in latencies.items():
            if len(lats) < r.min_samples:
                continue
            tail = p90(lats)
            window = self._p90s.setdefault(kind, deque(maxlen=r.baseline_intervals))
            window.append(tail)
            baseline = self.baseline_s(kind)
            assert baseline is not None
            ratios.append(tail / baseline)
        if not ratios:
            self.last_ratio = None
            return self.rate
        self.last_ratio = max(ratios)
        if deletes <= 0:
            return self.rate  # nothing is being paced: nothing to slow down or speed up
        if self.last_ratio > r.latency_factor:
            self.rate = max(r.floor, self.rate * r.decrease)
            self.decreases += 1
            if not self.slowed and self.rate < r.ceiling:
                self.slowed = True
                self.last_change = PaceChange.SLOWED
        else:
            self.rate = min(r.ceiling, self.rate + r.increase_fraction * r.ceiling)
            if self.slowed and self.rate >= r.ceiling:
                self.slowed = False
                self.last_change = PaceChange.RECOVERED
        return self.rate
