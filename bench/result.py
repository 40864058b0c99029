"""One measured row of the benchmark."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Row:
    key: str  # stable id, e.g. "raw-bookie-c16", "worker-direct-c16"
    what: str  # what was measured, for humans
    kind: str  # "raw" (storage ceiling) | "worker" (the daemon)
    route: str  # "-" for raw rows, else the pipeline route: "direct" | "owner" | "none" (settled by the batch sweep)
    delete_via: str  # "bookie-http" | "zookeeper"
    concurrency: int
    n: int
    completed: int = 0
    seconds: float | None = None
    rate: float | None = None  # completed / seconds
    latency_s: dict[str, float | None] = field(default_factory=dict)  # p50/p95/p99
    latency_mean_s: float | None = None
    latency_source: str = ""
    baseline: str | None = None  # key of the raw row this one is compared with
    ratio: float | None = None  # rate / baseline rate
    peak_rss_mib: float | None = None
    rss_ready_mib: float | None = None
    cpu_s: float | None = None
    leftover: int | None = None  # ledgers of this group still in BookKeeper afterwards
    errors: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def finish(self, seconds: float) -> None:
        self.seconds = seconds
        self.rate = self.completed / seconds if seconds > 0 else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)
