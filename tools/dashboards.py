"""The Grafana dashboard, as code (grafana-foundation-sdk, Grafana 11 builds; the ``ops`` extra).

``make dashboards`` runs ``python -m tools.dashboards``: it writes the dashboard into the Helm chart,
``deploy/helm/ledger-deletion-worker/files/ledger-deletion.json`` (the chart ships it as a ConfigMap for Grafana's
sidecar; import the same file by hand elsewhere). A test fails when the committed file differs from what this
module generates, and the Prometheus integration test runs every panel's query against a real Prometheus
scraping a real worker and broker.

Queries use Grafana's ``$__rate_interval`` and a ``$datasource`` variable and nothing else dashboard-specific.
Worker series carry ``job="ledger-deletion-worker"`` (scrape job / Service name), nightly ones the
Pushgateway grouping key of :mod:`worker.nightly.metrics`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from grafana_foundation_sdk.builders import common as common_b
from grafana_foundation_sdk.builders import dashboard as dash_b
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from worker.nightly import metrics as nm

UID = "ledger-deletion"
CHART_FILES = Path("deploy/helm/ledger-deletion-worker/files")
OUT = CHART_FILES / "ledger-deletion.json"
# The alert rules the chart renders as a PrometheusRule or VMRule (and a plain Prometheus loads as they are).
RULES = CHART_FILES / "ledger-deletion-rules.yml"
DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
# Queue topics: the worker's own names by default. The broker labels its series with the partition name.
NOT_OK = 'outcome!="ok"'
QUEUE_TOPICS = 'topic=~".*/__ledger_deletion.*"'
# BookKeeper's own garbage-collection metrics (bookkeeper-server GarbageCollectorStats, names in
# BookKeeperServerStats; scope "bookie", labels ledgerDir/indexDir of DbLedgerStorage), on each bookie's
# HTTP /metrics with the Prometheus stats provider.
BOOKIE_ENTRY_LOGS = "bookie_ACTIVE_ENTRY_LOG_SPACE_BYTES"
BOOKIE_RECLAIMED_DELETION = "bookie_RECLAIMED_DELETION_SPACE_BYTES"
BOOKIE_RECLAIMED_COMPACTION = "bookie_RECLAIMED_COMPACTION_SPACE_BYTES"
# The audit's open data and cursor ledgers nothing names (worker.nightly.metrics.ORPHAN_CLASSES).
OPEN_ORPHANS = 'class="bookkeeper_open"'


def _w(metric: str, extra: str = "") -> str:
    """A worker series selector: ``name{job="ledger-deletion-worker",extra}``."""
    inner = 'job="ledger-deletion-worker"' + (f",{extra}" if extra else "")
    return f"{metric}{{{inner}}}"


def _rate(metric: str, by: str = "", extra: str = "") -> str:
    group = f" by ({by})" if by else ""
    return f"sum{group}(rate({_w(metric, extra)}[$__rate_interval]))"


def _ratio(metric: str, by: str = "", window: str = "$__rate_interval") -> str:
    """Share of ``metric``'s requests whose outcome is not ``ok`` (0 when there were none)."""
    group = f" by ({by})" if by else ""
    bad = f"sum{group}(rate({_w(metric, NOT_OK)}[{window}]))"
    return f"{bad} / clamp_min(sum{group}(rate({_w(metric)}[{window}])), 1e-9)"


def _failure_ratio(window: str = "$__rate_interval") -> str:
    failed = f"sum(rate({_w('ledger_deletion_failed_total')}[{window}]))"
    return f"{failed} / clamp_min(sum(rate({_w('ledger_deletion_received_total')}[{window}])), 1e-9)"


def _q(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).range()


def _ts(
    title: str,
    queries: Sequence[tuple[str, str]],
    unit: str = "short",
    description: str = "",
    width: int = 12,
    stacked: bool = False,
) -> timeseries.Panel:
    p = timeseries.Panel().title(title).datasource(DS).unit(unit).span(width).height(8).fill_opacity(10)
    if description:
        p = p.description(description)
    if stacked:
        p = p.stacking(common_b.StackingConfig().mode(common.StackingMode.NORMAL))
    for i, (expr, legend) in enumerate(queries):
        p = p.with_target(_q(expr, legend, chr(ord("A") + i)))
    return p


def _stat(title: str, expr: str, unit: str = "short", description: str = "", width: int = 6) -> stat.Panel:
    p = stat.Panel().title(title).datasource(DS).unit(unit).span(width).height(4)
    if description:
        p = p.description(description)
    return p.with_target(_q(expr, title))


def _quantiles(metric: str, by: str = "") -> list[tuple[str, str]]:
    group = f", {by}" if by else ""
    suffix = f" {{{{{by}}}}}" if by else ""
    return [
        (
            f"histogram_quantile({q}, sum by (le{group}) (rate({_w(metric + '_bucket')}[$__rate_interval])))",
            f"p{round(q * 100)}{suffix}",
        )
        for q in (0.5, 0.9, 0.99)
    ]


def _nightly(metric: str, job: str, extra: str = "") -> str:
    return f'{metric}{{job="{job}"{"," + extra if extra else ""}}}'


def build() -> dash_b.Dashboard:
    d = (
        dash_b.Dashboard("Ledger deletion")
        .uid(UID)
        .tags(["pulsar", "bookkeeper", "ledger-deletion"])
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .description("Two-phase ledger deletion for Apache Pulsar: the worker, its queue, the nightly jobs, the leak.")
        .with_variable(dash_b.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    )

    d = d.with_row(dash_b.Row("The leak: what Pulsar references, what the bookies hold, what comes back"))
    d = d.with_panel(
        _ts(
            "Bytes: Pulsar's logical storage, the bookies' entry logs, the last audit's orphans",
            [
                ("sum(pulsar_storage_size)", "Pulsar storage size (all topics)"),
                ("sum(pulsar_storage_offloaded_size)", "offloaded size (all topics)"),
                (f"sum({BOOKIE_ENTRY_LOGS})", "live bytes in the bookies' entry logs (at their last GC)"),
                (f"sum by (class) ({_nightly(nm.AUDIT_ORPHAN_BYTES, nm.JOB_AUDIT)})", "orphan bytes ({{class}})"),
                (
                    f"sum({_nightly(nm.AUDIT_HELD_PAST_RETENTION_BYTES, nm.JOB_AUDIT)})",
                    "held past retention by idle topics",
                ),
            ],
            unit="bytes",
            description=(
                "What the brokers account for (pulsar_storage_size, summed over topics; one copy per byte), what "
                "the bookies' entry logs still hold for existing ledgers (BookKeeper's ACTIVE_ENTRY_LOG_SPACE_BYTES: "
                "computed by each garbage collection over the rolled entry logs; every copy of the write quorum) "
                "and what the last audit found that no topic references. Bookie bytes that keep growing while "
                "Pulsar's size stays flat are space nothing references; orphan bytes that grow night after night "
                "are the leak. Held past retention: closed ledgers idle topics still list past their retention, "
                "which no broker trims while the topic stays unloaded (not orphans: trim-idle --apply has them "
                "trimmed)."
            ),
            width=6,
        )
    )
    d = d.with_panel(
        _ts(
            "Deleted by the worker vs reclaimed by the bookies",
            [
                (_rate("ledger_deletion_freed_bytes_total", "ledger_type"), "deleted by the worker ({{ledger_type}})"),
                (f"sum(rate({BOOKIE_RECLAIMED_DELETION}[$__rate_interval]))", "reclaimed: entry logs removed"),
                (f"sum(rate({BOOKIE_RECLAIMED_COMPACTION}[$__rate_interval]))", "reclaimed: compaction"),
            ],
            unit="Bps",
            description=(
                "Bytes of the ledgers the worker deleted (their metadata length; offloaded objects' sizes) beside "
                "the disk the bookies' garbage collection gave back (BookKeeper's RECLAIMED_DELETION_SPACE_BYTES "
                "and RECLAIMED_COMPACTION_SPACE_BYTES). The bookies reclaim later than the worker deletes: at "
                "their next collection (gcWaitTime), or when bookkeeper.gc_trigger_bytes asks for one, and only "
                "entry logs whose ledgers are all deleted, or that compaction rewrites."
            ),
            width=6,
        )
    )
    d = d.with_panel(
        _ts(
            "Ledgers on the bookies vs orphans found",
            [
                ("sum(bookie_ledgers_count)", "ledgers on bookies"),
                ("sum(bookie_entries_count)", "entries on bookies"),
                (f"sum by (class) ({_nightly(nm.AUDIT_ORPHANS, nm.JOB_AUDIT)})", "orphans ({{class}})"),
            ],
            description="BookKeeper's own counts (bookie /metrics) beside the orphans of the last audit.",
            width=6,
        )
    )
    d = d.with_panel(
        _ts(
            "Bookie ledger disk use",
            [('max by (instance) ({__name__=~"bookie_ledger_dir_.+_usage"})', "{{instance}}")],
            unit="percent",
            description=(
                "Fill level of the file system under each bookie's ledger directory (BookKeeper names the gauge "
                "after the path). Disk that keeps filling while Pulsar's storage size stays flat is space "
                "nothing references."
            ),
            width=6,
        )
    )

    d = d.with_row(dash_b.Row("Worker"))
    d = d.with_panel(_stat("Ready replicas", f"sum({_w('ledger_deletion_ready')})"))
    d = d.with_panel(_stat("In flight (all replicas)", f"sum({_w('ledger_deletion_inflight')})"))
    d = d.with_panel(
        _stat(
            "Queued (pending + retry + DLQ)",
            f"max by (role) ({_w('ledger_deletion_topic_backlog')})",
            description="Backlog of the worker subscription on pending and retry, and of the replay subscription.",
        )
    )
    d = d.with_panel(
        _stat(
            "Failure ratio (5m)",
            _failure_ratio("5m"),
            unit="percentunit",
        )
    )
    d = d.with_panel(
        _ts(
            "Deletions/s by type and route",
            [(_rate("ledger_deletion_deleted_total", "ledger_type, route"), "{{ledger_type}} via {{route}}")],
            unit="ops",
        )
    )
    d = d.with_panel(
        _ts(
            "Outcomes/s",
            [
                (_rate("ledger_deletion_deleted_total", "result"), "{{result}}"),
                (_rate("ledger_deletion_rejected_total", "reason"), "rejected: {{reason}}"),
                (_rate("ledger_deletion_in_use_total"), "in use"),
                (_rate("ledger_deletion_processing_seconds_count", "outcome", 'outcome="too_young"'), "too young"),
            ],
            unit="ops",
            description="deleted / already gone, rejected by reason (forged or foreign: never deleted), in use, young",
        )
    )
    d = d.with_panel(
        _ts(
            "Failures/s by stage and failure ratio",
            [
                (_rate("ledger_deletion_failed_total", "stage"), "{{stage}}"),
                (_failure_ratio(), "failure ratio"),
            ],
            unit="ops",
        )
    )
    d = d.with_panel(
        _ts(
            "Retries and dead letters/s",
            [
                (_rate("ledger_deletion_retried_total"), "retried"),
                (_rate("ledger_deletion_dlq_total", "reason"), "DLQ: {{reason}}"),
                (_rate("ledger_deletion_acked_total"), "acked"),
            ],
            unit="ops",
        )
    )
    d = d.with_panel(
        _ts(
            "End-to-end latency (first publication to outcome)",
            _quantiles("ledger_deletion_end_to_end_seconds"),
            unit="s",
        )
    )
    d = d.with_panel(
        _ts("Processing latency by route", _quantiles("ledger_deletion_processing_seconds", "route"), unit="s")
    )
    d = d.with_panel(
        _ts(
            "Pace: delete rate allowed and the metadata store's answer",
            [
                ("sum(" + _w("ledger_deletion_pace_deletes_per_second") + ")", "deletes/s allowed"),
                (_rate("ledger_deletion_deleted_total", extra='result="deleted"'), "deleted/s"),
                ("max(" + _w("ledger_deletion_pace_latency_ratio") + ")", "p90 / idle p90 (worst kind)"),
                (_rate("ledger_deletion_pace_decreases_total"), "halvings/s"),
            ],
            description=(
                "The worker's delete rate follows BookKeeper's metadata store while it deletes: it halves whenever"
                " the p90 of its own calls to the store is over worker.pace_latency_factor x the store's idle p90,"
                " and creeps back up to worker.deletes_per_second while it is not. With nothing to delete it holds."
            ),
        )
    )
    d = d.with_panel(
        _ts(
            "Metadata store calls (this worker's)",
            _quantiles("ledger_deletion_metadata_call_seconds", "kind"),
            unit="s",
        )
    )
    d = d.with_panel(_ts("In flight per replica", [(f"{_w('ledger_deletion_inflight')}", "{{instance}}")], width=8))
    d = d.with_panel(
        _ts(
            "Open ledgers nothing names: found and recovered",
            [
                (
                    f"sum({_nightly(nm.AUDIT_ORPHANS, nm.JOB_AUDIT, OPEN_ORPHANS)})",
                    "found by the last audit",
                ),
                (
                    f"sum by (component) (increase({_w('ledger_deletion_recovered_total')}[1d]))",
                    "recovered by the worker in the last day ({{component}})",
                ),
            ],
            description=(
                "Open data and cursor ledgers of live topics that neither the topic's owner nor its stored record "
                "names, older than the minimum age: what a broker that died between a cursor switch and its delete "
                "of the old ledger leaves (Pulsar 4.0 deletes it without closing it). The audit counts them "
                "(orphan class bookkeeper_open); the worker fences and closes each (recovered) before its delete."
            ),
            width=8,
        )
    )
    d = d.with_panel(
        _ts(
            "Decoded by writer",
            [(_rate("ledger_deletion_decoded_total", "source, writer"), "{{source}} {{writer}}")],
            unit="ops",
            description=(
                "Pending deletions decoded/s by who queued them (the payload's source: broker-extension, scanner, "
                "audit, ...) and the Pulsar version of the broker that wrote them (unknown: not written by the "
                "broker extension, or by a version of it that did not say). In a rolling upgrade both Pulsar "
                "lines show here while their brokers serve topics."
            ),
            width=8,
        )
    )

    d = d.with_row(dash_b.Row("Queue topics"))
    d = d.with_panel(
        _ts(
            "Backlogs (pending, retry, DLQ)",
            [
                (f"max by (role) ({_w('ledger_deletion_topic_backlog')})", "{{role}}"),
                (
                    f"sum by (subscription) (pulsar_subscription_back_log{{{QUEUE_TOPICS}}})",
                    "broker: {{subscription}}",
                ),
            ],
            description="Worker-polled admin stats; the broker's own view of the same subscriptions beside it.",
        )
    )
    d = d.with_panel(
        _ts(
            "Age of the oldest pending message",
            [(f"max by (role) ({_w('ledger_deletion_topic_oldest_backlog_age_seconds')})", "{{role}}")],
            unit="s",
            description="From publication (phase 1's deliver_after delay included) to now, per queue topic.",
        )
    )
    d = d.with_panel(
        _ts(
            "Published to the queue topics/s",
            [(f"sum by (role) (rate({_w('ledger_deletion_topic_messages_in')}[$__rate_interval]))", "{{role}}")],
            unit="ops",
        )
    )
    d = d.with_panel(
        _ts(
            "Consumers on the worker subscription (broker view)",
            [
                (
                    f"sum by (subscription) (pulsar_subscription_consumers_count{{{QUEUE_TOPICS}}})",
                    "{{subscription}}",
                )
            ],
        )
    )

    d = d.with_row(dash_b.Row("Backends"))
    d = d.with_panel(
        _ts(
            "Admin API requests/s and error ratio",
            [
                (_rate("ledger_deletion_admin_requests_total", "endpoint, outcome"), "{{endpoint}} {{outcome}}"),
                (_ratio("ledger_deletion_admin_requests_total"), "error ratio"),
            ],
            unit="ops",
        )
    )
    d = d.with_panel(
        _ts(
            "Storage requests/s and error ratio",
            [
                (
                    _rate("ledger_deletion_storage_requests_total", "backend, operation, outcome"),
                    "{{backend}} {{operation}} {{outcome}}",
                ),
                (_ratio("ledger_deletion_storage_requests_total", "backend"), "error ratio {{backend}}"),
            ],
            unit="ops",
        )
    )

    d = d.with_panel(
        _ts(
            "Bookie HTTP calls/s by bookie",
            [
                (
                    _rate("ledger_deletion_bookie_http_requests_total", "bookie, operation, outcome"),
                    "{{bookie}} {{operation}} {{outcome}}",
                ),
            ],
            unit="ops",
        )
    )

    d = d.with_row(dash_b.Row("Nightly jobs (Pushgateway)"))
    for job, title in ((nm.JOB_REPLAY, "DLQ replay"), (nm.JOB_AUDIT, "Audit")):
        d = d.with_panel(
            _stat(
                f"{title}: since last success",
                f"time() - {_nightly(nm.LAST_SUCCESS, job)}",
                unit="s",
                width=4,
            )
        )
        d = d.with_panel(_stat(f"{title}: last run failed", _nightly(nm.FAILED, job), width=4))
        d = d.with_panel(_stat(f"{title}: duration", _nightly(nm.DURATION, job), unit="s", width=4))
    d = d.with_panel(
        _ts(
            "Nightly rows by outcome",
            [(f'sum by (job, outcome) ({nm.ROWS}{{job=~"{nm.JOB_REPLAY}|{nm.JOB_AUDIT}"}})', "{{job}} {{outcome}}")],
            width=24,
        )
    )
    return d


def render() -> str:
    return json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the dashboard; the path is relative to the repository root (the working directory)."""
    del argv
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render())
    print(f"wrote {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
