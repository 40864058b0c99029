"""The latency of the worker's own calls to a metadata store, by kind, for the pace
(``worker.core.pace``): what the store answers is the signal the worker slows down on."""

from __future__ import annotations

from collections import defaultdict

# Kinds of call: a write needs a quorum and a read does not, so each is compared with its own idle level.
READ = "read"
WRITE = "write"
# kazoo's methods (and the multiRead helper) by kind; anything else counts as a read.
_WRITES = frozenset({"delete_async", "set_async", "create_async", "commit_async"})

# Samples kept per kind between two drains: far more than a control interval needs, and a bound on memory
# should nobody drain them.
MAX_SAMPLES = 20_000


def kind_of(method_name: str) -> str:
    return WRITE if method_name in _WRITES else READ


class StoreLatency:
    def __init__(self) -> None:
        self._samples: dict[str, list[float]] = defaultdict(list)

    def record(self, kind: str, seconds: float) -> None:
        samples = self._samples[kind]
        if len(samples) < MAX_SAMPLES:
            samples.append(seconds)

    def drain(self) -> dict[str, list[float]]:
        """Every sample since the last drain, by kind."""
        out, self._samples = dict(self._samples), defaultdict(list)
        return out
