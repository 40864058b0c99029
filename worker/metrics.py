"""Prometheus metrics (prefix ``ledger_deletion_``), one registry per daemon.

A registry per instance (not prometheus_client's global one) so that tests and the benchmark can run
several workers in one process, and the phase-1 library can count ``sent`` without clashing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# The payload properties (PendingDeleteLedgerInfo.properties) that say who queued a pending deletion: every
# producer of this project sets source; the broker extension also the Pulsar version of the broker that wrote it.
SOURCE_PROPERTY = "source"
PULSAR_VERSION_PROPERTY = "pulsar_version"
# Any producer of the queue writes these properties: a label value is cut short so that what it carries stays a
# short name, whatever the producer put there.
DECODED_LABEL_MAX_CHARS = 64
UNKNOWN_LABEL = "unknown"

_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_E2E_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry()
        p = "ledger_deletion_"

        def counter(name: str, doc: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(p + name, doc, labels, registry=r)

        def gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(p + name, doc, labels, registry=r)

        def histogram(name: str, doc: str, buckets: tuple[float, ...], labels: tuple[str, ...] = ()) -> Histogram:
            return Histogram(p + name, doc, labels, buckets=buckets, registry=r)

        self.sent = counter("sent", "Pending deletions sent by phase 1 in this process")
        self.received = counter("received", "Pending-deletion messages received")
        # Which brokers' (and tools') pending deletions this worker reads: in a rolling upgrade, both Pulsar lines'.
        self.decoded = counter(
            "decoded",
            "Pending deletions decoded, by who queued them (the payload's source property) and the Pulsar version"
            " of the broker that wrote them (pulsar_version; 'unknown' when absent)",
            ("source", "writer"),
        )
        self.deleted = counter(
            "deleted",
            "Ledgers settled as deleted (result=deleted: this worker deleted it; already_gone: not found)",
            ("ledger_type", "route", "result"),
        )
        # The disk an operator gets back (``worker.core.freed_bytes``): a closed ledger's metadata length, an
        # offloaded copy's object sizes; logical bytes (each bookie of the write quorum holds a copy, freed
        # by its own garbage collection later). Deletions whose size storage did not record add nothing.
        self.freed_bytes = counter(
            "freed_bytes",
            "Bytes freed by ledgers this worker deleted (ledger metadata length, offloaded object sizes)",
            ("ledger_type", "route"),
        )
        # worker.core.open_ledger: open data and cursor ledgers nothing named, fenced and closed by this worker
        # before their delete (as BookKeeper's recovery open does).
        self.recovered = counter(
            "recovered",
            "Open ledgers nothing named, recovered (fenced and closed) by this worker before their delete",
            ("component",),
        )
        # Both kinds that may be recovered exist from the start at 0: "none yet" is a value, not a missing series.
        for component in ("MANAGED_LEDGER", "MANAGED_CURSOR"):
            self.recovered.labels(component=component)
        self.failed = counter("failed", "Attempts that failed, by pipeline stage", ("stage",))
        self.in_use = counter("in_use", "Messages whose ledger the owner still references")
        self.rejected = counter("rejected", "Messages rejected by storage identity verification", ("reason",))
        self.retried = counter("retried", "Messages re-published to the retry topic")
        self.dlq = counter("dlq", "Messages parked in the dead-letter topic", ("reason",))
        self.acked = counter("acked", "Messages acknowledged")
        self.processing = histogram("processing_seconds", "Time to process one message", _BUCKETS, ("route", "outcome"))
        self.end_to_end = histogram(
            "end_to_end_seconds", "From first publication of a pending deletion to its final outcome", _E2E_BUCKETS
        )
        self.inflight = gauge("inflight", "Messages being processed by this worker")
        self.batch_messages = histogram(
            "batch_messages",
            "Messages per received batch (a batch shares its metadata reads and its storage deletes)",
            (1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
        )
        self.admin_requests = counter("admin_requests", "Pulsar admin API requests", ("endpoint", "outcome"))
        self.storage_requests = counter(
            "storage_requests", "Storage backend requests", ("backend", "operation", "outcome")
        )
        # The pace (worker.core.pace): the delete rate the metadata store's health allows now, and why.
        self.pace_rate = gauge(
            "pace_deletes_per_second",
            "Storage deletes per second this worker allows itself now (the pace; worker.deletes_per_second when off)",
        )
        self.pace_latency_ratio = gauge(
            "pace_latency_ratio",
            "Last interval's worst p90 of this worker's metadata-store calls, over the store's idle p90 (by kind)",
        )
        self.pace_decreases = counter(
            "pace_decreases",
            "Times the pace halved the delete rate: the metadata store answered slowly while this worker was deleting",
        )
        self.metadata_calls = histogram(
            "metadata_call_seconds",
            "This worker's calls to BookKeeper's metadata store, by kind (read, write)",
            (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            ("kind",),
        )
        # Per bookie (bookkeeper.http_url + http_urls): how the calls spread, and which bookie fails.
        self.bookie_http_requests = counter(
            "bookie_http_requests",
            "Bookie HTTP admin calls by bookie endpoint, operation and outcome (HTTP status, unreachable, error)",
            ("bookie", "operation", "outcome"),
        )
        # Polled from the admin API so operators see phase-1 traffic produced by other processes.
        self.topic_published = gauge(
            "topic_messages_in", "Messages ever published to a deletion topic (admin stats msgInCounter)", ("role",)
        )
        self.topic_backlog = gauge(
            "topic_backlog", "Backlog of the worker (or DLQ replay) subscription on a deletion topic", ("role",)
        )
        self.topic_oldest_backlog_age = gauge(
            "topic_oldest_backlog_age_seconds",
            "Age of the oldest message in that subscription's backlog (0 when empty)",
            ("role",),
        )
        # PIP-269's lesson, made visible: how often a topic's live state was invalidated (307, owner
        # change, topic gone or re-created) and how often a delete decision was re-taken because of it.
        self.epoch_bumps = counter("epoch_bumps", "Topic live-state invalidations (epoch bumps)")
        self.reevaluations = counter("reevaluations", "Delete decisions re-taken because the topic's epoch moved")
        # bookkeeper.gc_trigger_bytes (worker.daemon.bookie_gc): garbage collections asked of each bookie.
        self.bookie_gc_requests = counter(
            "bookie_gc_requests",
            "Garbage collections asked of the bookies (PUT /api/v1/bookie/gc), by bookie and HTTP status",
            ("bookie", "outcome"),
        )
        self.bookie_gc_pending_bytes = gauge(
            "bookie_gc_pending_bytes",
            "Bytes of BookKeeper ledgers deleted since the last garbage collection asked of the bookies",
        )
        self.ready = gauge("ready", "1 when the worker is subscribed and processing")


def decoded_labels(properties: Mapping[str, str]) -> tuple[str, str]:
    """The ``decoded`` counter's ``(source, writer)`` for a decoded record's payload properties: each cut to
    :data:`DECODED_LABEL_MAX_CHARS` characters, :data:`UNKNOWN_LABEL` when absent or empty."""

    def label(key: str) -> str:
        return (properties.get(key) or "")[:DECODED_LABEL_MAX_CHARS] or UNKNOWN_LABEL

    return label(SOURCE_PROPERTY), label(PULSAR_VERSION_PROPERTY)


def oldest_backlog_age_s(subscription_stats: Mapping[str, Any], now_ms: int) -> float:
    """Age of a subscription's oldest unacknowledged message from its admin stats (``getEarliestTimeInBacklog``),
    0 when empty or not computed; counted from publication, so the phase-1 ``deliver_after`` delay is part of it."""
    earliest = int(subscription_stats.get("earliestMsgPublishTimeInBacklog") or 0)
    if earliest <= 0 or not subscription_stats.get("msgBacklog"):
        return 0.0
    return max(0.0, (now_ms - earliest) / 1000)
