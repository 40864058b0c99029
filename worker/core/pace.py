"""How fast to delete: paced by the metadata store's health, not a fixed rate.

Every ledger deletion is a write to BookKeeper's metadata store (the worker's own versioned delete, or the
bookie's), and a burst of them is what turns ZooKeeper latency into minutes for every broker sharing the
ensemble. So the rate follows what the store answers: the latency of the worker's own metadata calls, over
each control interval, against the store's idle level.

- **Idle level**: per kind of call (reads, writes: a write needs a quorum, a read does not, so each is
  compared with its own kind), the lower quartile of the interval p90s seen over the baseline window (ten
  minutes of intervals by default): low enough that this worker's own load does not raise it, not so low that
  one lucky interval makes every ordinary one look slow. A store busy all the time (another tenant, a large
  cluster) has a higher idle level, and the rule compares against that, not against an absolute number.
- **AIMD**: while every kind's interval p90 stays within ``latency_factor`` times its idle level, the rate
  grows by a fixed step (a twentieth of the ceiling per interval); above it, the rate halves. Halving on
  congestion and creeping back is TCP's answer to the same problem: the rate settles just under what the
  store absorbs without queueing, and many replicas pacing themselves this way share the store fairly.
- **Bounds**: never above ``deletes_per_second`` (the operator's ceiling), never below ``floor`` (so a store
  slow for reasons of its own still sees the backlog move, slowly). It starts at a tenth of the ceiling: the
  first interval has no evidence yet.
- A kind with fewer than ``min_samples`` calls in an interval says nothing about it; an interval in which no
  kind has enough holds the rate.
- **Only while deleting**: a step counts only when deletes were issued in its interval or are waiting for a
  token at its end. A worker with nothing to delete holds its rate (no halving, no growth), however the store
  answers: a latency that no delete of this worker adds to, and no delete of this worker waits on, is no
  reason to move, and an idle worker halving on a store warming up reads as an alarm. Its interval still
  feeds the idle level (that is the store idle) and ``last_ratio``.
- **State changes**: the pace is *slowed* from a halving that leaves it below the ceiling until it is back at
  the ceiling (*recovered*); ``last_change`` names the interval that crossed either way, once per crossing,
  not once per step (the counters carry every step).
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
