"""The local stack's addresses and the benchmark's knobs."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from testkit.stack import REPO, Profile, Stack, healthy, stack_of

OUT = REPO / "bench" / "out"
# Runs worth keeping are committed under bench/results/; a smoke run (the README-commands test) points this
# elsewhere so it leaves the tree as it found it.
RESULTS = Path(os.environ.get("BENCH_RESULTS_DIR") or REPO / "bench" / "results")


def int_knob(name: str, default: int, lo: int, hi: int) -> int:
    """The integer environment variable ``name`` (``default`` unset), refused outside ``lo..hi`` naming it."""
    v = int(os.environ.get(name, str(default)))
    if not lo <= v <= hi:
        raise SystemExit(f"{name} must be {lo}..{hi}")
    return v


@dataclass(frozen=True)
class Knobs:
    n: int
    concurrency: int
    owner_n: int
    zk: bool
    bookie: bool = True  # the bookie HTTP rows (slow: ~9 deletions/s, the bookie's own ceiling)
    zk_n: int = 10_000  # ledgers per ZooKeeper-route row (issue 17's goal is measured over >= 10,000)

    @classmethod
    def from_env(cls) -> Knobs:
        n = int(os.environ.get("BENCH_N", "300"))
        c = int(os.environ.get("BENCH_CONCURRENCY", "16"))
        owner_n = int(os.environ.get("BENCH_OWNER_N", "50"))
        zk = os.environ.get("BENCH_ZK", "1") not in ("0", "false", "no", "")
        bookie = os.environ.get("BENCH_BOOKIE", "1") not in ("0", "false", "no", "")
        zk_n = int(os.environ.get("BENCH_ZK_N", "10000"))
        if not (1 <= n <= 200_000 and 1 <= c <= 256 and 0 <= owner_n <= 1000 and 1 <= zk_n <= 200_000):
            raise SystemExit(
                "BENCH_N and BENCH_ZK_N must be 1..200000, BENCH_CONCURRENCY 1..256, BENCH_OWNER_N 0..1000"
            )
        return cls(n, c, owner_n, zk, bookie, zk_n)


def stack(wait_s: float = 180.0) -> Stack:
    """The stack's addresses from ``stack.sh env``. ``make bench`` brings the stack up first; here the bench
    only waits for it to be healthy (a broker restarting answers unhealthy for a while). It never starts
    one itself: a start from another checkout while the shared stack restarts takes its ports with an
    empty stack of its own."""
    shared = Profile(os.environ.get("PROFILE", "standalone"))
    deadline = time.monotonic() + wait_s
    while not healthy(shared.addresses()):
        if time.monotonic() > deadline:
            raise SystemExit(f"the local stack is not healthy after {wait_s:.0f}s (make stack-up starts it)")
        time.sleep(2)
    return stack_of(shared.addresses())
