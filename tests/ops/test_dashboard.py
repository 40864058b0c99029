"""The committed dashboard is what tools/dashboards.py generates, and every panel has working queries."""

from __future__ import annotations

import json

from tests.conftest import REPO
from tests.ops.promql import dashboard_queries
from tools import dashboards as dashboard

JSON = REPO / dashboard.OUT


def test_committed_dashboard_is_current() -> None:
    assert JSON.read_text() == dashboard.render(), f"{dashboard.OUT} is stale: run `make dashboards`"


def test_every_panel_has_queries_with_distinct_ref_ids() -> None:
    board = json.loads(JSON.read_text())
    panels = [p for p in board["panels"] if p["type"] != "row"]
    assert len(panels) >= 20
    for p in panels:
        refs = [t["refId"] for t in p["targets"]]
        assert refs and all(refs) and len(set(refs)) == len(refs), p["title"]
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]


def test_issue_panels_are_present() -> None:
    exprs = "\n".join(q for _, q in dashboard_queries(json.loads(JSON.read_text())))
    for needed in (
        "sum(pulsar_storage_size)",  # the leak: Pulsar's logical storage ...
        "bookie_ledgers_count",  # ... beside the bookies' ledger counts ...
        "bookie_ledger_dir_.+_usage",  # ... and disk use ...
        "ledger_deletion_audit_orphan_bytes",  # ... and the orphan bytes the last audit found
        "bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES",  # the bookies' entry logs (BookKeeper's GarbageCollectorStats) ...
        "ledger_deletion_freed_bytes_total",  # ... our deleted bytes beside what the bookies reclaimed:
        "bookie_RECLAIMED_DELETION_SPACE_BYTES",
        "bookie_RECLAIMED_COMPACTION_SPACE_BYTES",
        "ledger_deletion_topic_oldest_backlog_age_seconds",
        "ledger_deletion_nightly_last_success_timestamp_seconds",
        "ledger_deletion_end_to_end_seconds_bucket",
        "ledger_deletion_storage_requests_total",
        "ledger_deletion_bookie_http_requests_total",
        "ledger_deletion_admin_requests_total",
        "ledger_deletion_dlq_total",
        "ledger_deletion_failed_total",
    ):
        assert needed in exprs, needed
