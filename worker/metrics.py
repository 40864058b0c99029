"""Prometheus metrics (prefix ``ledger_deletion_``), one registry per daemon.

A registry per instance (not prometheus_client's global one) so that tests and the benchmark can run
several workers in one process, and the phase-1 library can count ``sent`` without clashing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_E2E_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        p = "ledger_deletion_"
        self.sent = Counter(f"{p}sent", "Pending deletions sent by phase 1 in this process", registry=r)
        self.received = Counter(f"{p}received", "Pending-deletion messages received", registry=r)
        self.deleted = Counter(
            f"{p}deleted",
            "Ledgers settled as deleted (result=deleted: this worker deleted it; already_gone: not found)",
            ["ledger_type", "route", "result"],
            registry=r,
        )
        # The disk an operator gets back (``worker.core.freed_bytes``): a closed ledger's metadata length, an
        # offloaded copy's object sizes; logical bytes (each bookie of the write quorum holds a copy, freed
        # by its own garbage collection later). Deletions whose size storage did not record add nothing.
        self.freed_bytes = Counter(
            f"{p}freed_bytes",
            "Bytes freed by ledgers this worker deleted (ledger metadata length, offloaded object sizes)",
            ["ledger_type", "route"],
            registry=r,
        )
        # worker.core.open_ledger: open data and cursor ledgers nothing named, fenced and closed by this worker
        # before their delete (as BookKeeper's recovery open does).
        self.recovered = Counter(
            f"{p}recovered",
            "Open ledgers nothing named, recovered (fenced and closed) by this worker before their delete",
            ["component"],
            registry=r,
        )
        # Both kinds that may be recovered exist from the start at 0: "none yet" is a value, not a missing series.
        for component in ("MANAGED_LEDGER", "MANAGED_CURSOR"):
            self.recovered.labels(component=component)
        self.failed = Counter(f"{p}failed", "Attempts that failed, by pipeline stage", ["stage"], registry=r)
        self.in_use = Counter(f"{p}in_use", "Messages whose ledger the owner still references", registry=r)
        self.rejected = Counter(
            f"{p}rejected", "Messages rejected by storage identity verification", ["reason"], registry=r
        )
        self.retried = Counter(f"{p}retried", "Messages re-published to the retry topic", registry=r)
        self.dlq = Counter(f"{p}dlq", "Messages parked in the dead-letter topic", ["reason"], registry=r)
        self.acked = Counter(f"{p}acked", "Messages acknowledged", registry=r)
        self.processing = Histogram(
            f"{p}processing_seconds",
            "Time to process one message",
            ["route", "outcome"],
            buckets=_BUCKETS,
            registry=r,
        )
        self.end_to_end = Histogram(
            f"{p}end_to_end_seconds",
            "From first publication of a pending deletion to its final outcome",
            buckets=_E2E_BUCKETS,
            registry=r,
        )
        self.inflight = Gauge(f"{p}inflight", "Messages being processed by this worker", registry=r)
        self.batch_messages = Histogram(
            f"{p}batch_messages",
            "Messages per received batch (a batch shares its metadata reads and its storage deletes)",
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
            registry=r,
        )
        self.admin_requests = Counter(
            f"{p}admin_requests", "Pulsar admin API requests", ["endpoint", "outcome"], registry=r
        )
        self.storage_requests = Counter(
            f"{p}storage_requests", "Storage backend requests", ["backend", "operation", "outcome"], registry=r
        )
        # The pace (worker.core.pace): the delete rate the metadata store's health allows now, and why.
        self.pace_rate = Gauge(
            f"{p}pace_deletes_per_second",
            "Storage deletes per second this worker allows itself now (the pace; worker.deletes_per_second when off)",
            registry=r,
        )
        self.pace_latency_ratio = Gauge(
            f"{p}pace_latency_ratio",
            "Last interval's worst p90 of this worker's metadata-store calls, over the store's idle p90 (by kind)",
            registry=r,
        )
        self.pace_decreases = Counter(
            f"{p}pace_decreases",
            "Times the pace halved the delete rate: the metadata store answered slowly while this worker was deleting",
            registry=r,
        )
        self.metadata_calls = Histogram(
            f"{p}metadata_call_seconds",
            "This worker's calls to BookKeeper's metadata store, by kind (read, write)",
            ["kind"],
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=r,
        )
        # Per bookie (bookkeeper.http_url + http_urls): how the calls spread, and which bookie fails.
        self.bookie_http_requests = Counter(
            f"{p}bookie_http_requests",
            "Bookie HTTP admin calls by bookie endpoint, operation and outcome (HTTP status, unreachable, error)",
            ["bookie", "operation", "outcome"],
            registry=r,
        )
        # Polled from the admin API so operators see phase-1 traffic produced by other processes.
        self.topic_published = Gauge(
            f"{p}topic_messages_in",
            "Messages ever published to a deletion topic (admin stats msgInCounter)",
            ["role"],
            registry=r,
        )
        self.topic_backlog = Gauge(
            f"{p}topic_backlog",
            "Backlog of the worker (or DLQ replay) subscription on a deletion topic",
            ["role"],
            registry=r,
        )
        self.topic_oldest_backlog_age = Gauge(
            f"{p}topic_oldest_backlog_age_seconds",
            "Age of the oldest message in that subscription's backlog (0 when empty)",
            ["role"],
            registry=r,
        )
        # PIP-269's lesson, made visible: how often a topic's live state was invalidated (307, owner
        # change, topic gone or re-created) and how often a delete decision was re-taken because of it.
        self.epoch_bumps = Counter(f"{p}epoch_bumps", "Topic live-state invalidations (epoch bumps)", registry=r)
        self.reevaluations = Counter(
            f"{p}reevaluations", "Delete decisions re-taken because the topic's epoch moved", registry=r
        )
        # bookkeeper.gc_trigger_bytes (worker.daemon.bookie_gc): garbage collections asked of each bookie.
        self.bookie_gc_requests = Counter(
            f"{p}bookie_gc_requests",
            "Garbage collections asked of the bookies (PUT /api/v1/bookie/gc), by bookie and HTTP status",
            ["bookie", "outcome"],
            registry=r,
        )
        self.bookie_gc_pending_bytes = Gauge(
            f"{p}bookie_gc_pending_bytes",
            "Bytes of BookKeeper ledgers deleted since the last garbage collection asked of the bookies",
            registry=r,
        )
        self.ready = Gauge(f"{p}ready", "1 when the worker is subscribed and processing", registry=r)


def oldest_backlog_age_s(subscription_stats: Mapping[str, Any], now_ms: int) -> float:
    """Age of a subscription's oldest unacknowledged message from its admin stats (asked with
    ``getEarliestTimeInBacklog=true``); 0 when the backlog is empty or the broker did not compute it.

    Pending deletions are sent with ``deliver_after``, so a message counts from its publication, not from
    when it became deliverable: the phase-1 delay is part of the age an operator sees.
    """
    earliest = int(subscription_stats.get("earliestMsgPublishTimeInBacklog") or 0)
    if earliest <= 0 or not subscription_stats.get("msgBacklog"):
        return 0.0
    return max(0.0, (now_ms - earliest) / 1000)
