"""What the nightly jobs push to a Prometheus Pushgateway: the one contract between the Spark jobs (producer),
the Grafana dashboard and the alert rules (consumers); scraped with ``honor_labels: true`` (docs/operations.md).

Each run pushes under the grouping key ``job=<JOB_*>``, always with ``pushadd`` (HTTP POST, :func:`push`): it
replaces only the metric names in that push, so a failed run (``failed=1``, no new success timestamp) leaves
the last success timestamp in place, and "missed" stays distinguishable from "failed".
"""

from __future__ import annotations

import time
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Gauge, pushadd_to_gateway

JOB_REPLAY = "ledger_deletion_replay"
JOB_AUDIT = "ledger_deletion_audit"
JOBS = (JOB_REPLAY, JOB_AUDIT)

# Every run, success or failure.
FAILED = "ledger_deletion_nightly_failed"  # 1 when the last run failed, 0 when it succeeded
DURATION = "ledger_deletion_nightly_duration_seconds"  # wall time of the last run
LAST_RUN = "ledger_deletion_nightly_last_run_timestamp_seconds"  # unix time the last run ended
# Successful runs only.
LAST_SUCCESS = "ledger_deletion_nightly_last_success_timestamp_seconds"
ROWS = "ledger_deletion_nightly_rows"  # {outcome}: replay: one row per ledger; audit: ledgers/object sets examined
# Replay only: the bytes the ledgers it deleted freed (worker.core.freed_bytes; 0 when it deleted none).
REPLAY_FREED_BYTES = "ledger_deletion_replay_freed_bytes"
# Audit only: what the anti-join found unreferenced, by where the bytes are.
AUDIT_ORPHANS = "ledger_deletion_audit_orphans"  # {class}
AUDIT_ORPHAN_BYTES = "ledger_deletion_audit_orphan_bytes"  # {class}
# Bytes of idle topics' ledgers past their retention (not orphans: ``trim-idle``), as the last audit read them.
AUDIT_HELD_PAST_RETENTION_BYTES = "ledger_deletion_audit_held_past_retention_bytes"

# Values of the `outcome` label of ROWS. Replay: the decision core's outcomes. Audit: orphan / in_use / skipped.
AUDIT_OUTCOMES = ("orphan", "in_use", "skipped")
# Values of the `class` label always pushed (0 when none): BookKeeper ledgers vs offloaded objects
# ({uuid}-ledger-{id}[-index]), and open data or cursor ledgers nothing names (BookKeeper's too, counted apart:
# the worker recovers them before their delete, and their bytes are unknown). Finer classes (e.g.
# "tiered_other_uuid") may be pushed too: panels sum by class.
ORPHAN_CLASSES = ("bookkeeper", "bookkeeper_open", "tiered")


def run_registry(
    *,
    failed: bool,
    duration_s: float,
    rows: Mapping[str, int] | None = None,
    orphans: Mapping[str, tuple[int, int]] | None = None,
    freed_bytes: int | None = None,
    held_past_retention_bytes: int | None = None,
    finished_at: float | None = None,
) -> CollectorRegistry:
    """The metrics of one run. ``rows``: outcome -> count; ``orphans``: class -> (count, bytes), audit only;
    ``freed_bytes``: what the deleted ledgers freed, replay only; ``held_past_retention_bytes``: the idle topics'
    ledgers past their retention, audit only (None: not computed, no series).

    A failed run carries no rows and no success timestamp: partial counts would read as a night's results.
    """
    now = time.time() if finished_at is None else finished_at
    r = CollectorRegistry()
    Gauge(FAILED, "1 when the last run of this nightly job failed", registry=r).set(1 if failed else 0)
    Gauge(DURATION, "Wall time of the last run", registry=r).set(duration_s)
    Gauge(LAST_RUN, "Unix time the last run ended", registry=r).set(now)
    if failed:
        return r
    Gauge(LAST_SUCCESS, "Unix time the last successful run ended", registry=r).set(now)
    g = Gauge(ROWS, "Rows of the last successful run, by outcome", ["outcome"], registry=r)
    for outcome, n in (rows or {}).items():
        g.labels(outcome=outcome).set(n)
    if freed_bytes is not None:
        Gauge(REPLAY_FREED_BYTES, "Bytes freed by the ledgers the last successful replay deleted", registry=r).set(
            freed_bytes
        )
    if held_past_retention_bytes is not None:
        Gauge(
            AUDIT_HELD_PAST_RETENTION_BYTES,
            "Bytes of idle topics' ledgers past their retention the last audit found (trim-idle reclaims them)",
            registry=r,
        ).set(held_past_retention_bytes)
    if orphans is not None:
        count = Gauge(AUDIT_ORPHANS, "Orphans the last audit found, by storage class", ["class"], registry=r)
        size = Gauge(AUDIT_ORPHAN_BYTES, "Bytes of the orphans the last audit found", ["class"], registry=r)
        # A zero is a finding too: the panel shows it rather than "no data".
        for cls in dict.fromkeys([*ORPHAN_CLASSES, *orphans]):
            n, nbytes = orphans.get(cls, (0, 0))
            count.labels(**{"class": cls}).set(n)
            size.labels(**{"class": cls}).set(nbytes)
    return r


def push(gateway: str, job: str, registry: CollectorRegistry, timeout_s: float = 10) -> None:
    """POST (pushadd) ``registry`` to the Pushgateway at ``gateway`` (``host:port`` or URL) under ``job``."""
    if job not in JOBS:
        raise ValueError(f"unknown nightly job {job!r}; expected one of {JOBS}")
    pushadd_to_gateway(gateway, job=job, registry=registry, timeout=timeout_s)
