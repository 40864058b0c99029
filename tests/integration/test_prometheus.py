"""Every dashboard query and every alert expression against a real Prometheus (Debian's, on loopback).

Prometheus scrapes a running worker, the broker's own /metrics and a real Pushgateway to which the nightly
jobs' metrics are pushed with :mod:`worker.nightly.metrics` (the nightly Spark jobs are another process:
here their push is made the same way, from this test). Real deletions, a real forged message, a real
dead S3 endpoint and too-young ledgers make every worker series the queries name exist. Then each query
must evaluate without error, each series selector in it must match series, and the alert rules loaded
by that Prometheus must evaluate healthy.

Prometheus scrapes the bookie's own /metrics too (``deploy/local/stack.sh`` turns on BookKeeper's Prometheus
provider: ``bookie_*``), and the bookie's selectors must match series like the rest. One exception, asserted
rather than assumed: a stack started before that setting (its bookie still on the null provider, /metrics
answering 500 "stats provider doesn't support exporting metrics") exports none; its bookie queries must
still parse and run, and the cluster profile's test (tests/cluster/test_leak_panel.py) checks their data.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest

from testkit.harness import WorkerHarness, free_port
from testkit.harness import ml_info as ml
from testkit.orphans import delete_topic_metadata_keep_ledgers, drop_ledgers_from_metadata
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import REPO, Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.prometheus_helpers import DASHBOARD, Prom, run_prometheus, selectors, wait_http
from tests.ops.promql import alert_rules, dashboard_queries
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.nightly import metrics as nm

pytestmark = pytest.mark.integration

RULES = REPO / "deploy" / "helm" / "ledger-deletion-worker" / "files" / "ledger-deletion-rules.yml"
# Only BookKeeper's own exporter provides these; see the module docstring and bookie_exports_metrics.
# The bookies' own metrics (bookie_*), not the worker's per-bookie counters (ledger_deletion_bookie_*).
BOOKIE_ONLY = re.compile(r"(?<![a-z_])bookie_")


def _s3_server_with_bucket(bucket: str) -> tuple[str, subprocess.Popen[bytes]]:
    """A second S3-API server of the test's own (moto), holding ``bucket``: its endpoint and process."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(Path(sys.executable).with_name("moto_server")), "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_http(f"{endpoint}/moto-api/")
        boto3.client(
            "s3",
            endpoint_url=endpoint,
            region_name="us-east-1",
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
        ).create_bucket(Bucket=bucket)
    except BaseException:
        proc.kill()
        raise
    return endpoint, proc


def start_prometheus(
    tmp_path: Path, worker_port: int, pushgateway: str, stack: Stack
) -> tuple[Prom, subprocess.Popen[bytes]]:
    broker = urllib.parse.urlparse(stack.admin_url)
    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [
            {"job_name": "ledger-deletion-worker", "static_configs": [{"targets": [f"127.0.0.1:{worker_port}"]}]},
            {
                # The shared broker's exposition is large: a gentler interval than the worker's.
                "job_name": "pulsar",
                "scrape_interval": "3s",
                "scrape_timeout": "3s",
                "metrics_path": "/metrics/",
                "static_configs": [{"targets": [broker.netloc]}],
            },
            {"job_name": "pushgateway", "honor_labels": True, "static_configs": [{"targets": [pushgateway]}]},
            {
                "job_name": "bookie",
                "static_configs": [{"targets": [urllib.parse.urlparse(stack.bookie_http_url).netloc]}],
            },
        ],
    }
    return run_prometheus(tmp_path, cfg)


def test_selector_extraction() -> None:
    assert selectors('sum(rate(ledger_deletion_x_total{job="a",outcome!="ok"}[1m])) / up{job="w"}') == [
        'ledger_deletion_x_total{job="a",outcome!="ok"}',
        'up{job="w"}',
    ]
    assert selectors('max by (instance) ({__name__=~"bookie_ledger_dir_.+_usage"})') == [
        '{__name__=~"bookie_ledger_dir_.+_usage"}'
    ]
    assert selectors("sum(pulsar_storage_size)") == ["pulsar_storage_size"]


def bookie_exports_metrics(stack: Stack) -> bool:
    """Whether the stack's bookie serves its own metrics (BookKeeper's Prometheus provider, as stack.sh
    configures it). A bookie that does not must be one still on the null provider (a stack started before
    stack.sh set it): anything else is a failure."""
    try:
        urllib.request.urlopen(f"{stack.bookie_http_url}/metrics", timeout=10).close()
        return True
    except urllib.error.HTTPError as e:
        assert e.code == 500
        assert "stats provider doesn't support exporting metrics" in e.read().decode()
        return False


async def test_dashboard_and_alerts_on_a_real_prometheus(
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    bookie: BookieClient,
    tmp_path: Path,
    pushgateway: str,
    make_worker: WorkerFactory,
) -> None:
    # An S3 target that is up when the worker starts (it refuses to start on a missing bucket) and down once
    # it runs: real connection refusals.
    dead_s3, moto = _s3_server_with_bucket("ops-dead")
    w = make_worker(
        f"prom-{unique}",
        worker={"min_ledger_age_s": 8, "max_attempts": 3},
        offload={
            "s3_targets": [
                {
                    "bucket": stack.s3_bucket,
                    "endpoint": stack.s3_endpoint,
                    "region": "us-east-1",
                    "access_key_id": "testing",
                    "secret_access_key": "testing",
                },
                {
                    "bucket": "ops-dead",
                    "endpoint": dead_s3,
                    "region": "us-east-1",
                    "access_key_id": "testing",
                    "secret_access_key": "testing",
                },
            ]
        },
        start=False,
    )
    try:
        w.start()
    finally:
        moto.terminate()
        moto.wait(timeout=30)
    prom, proc = start_prometheus(tmp_path, w.port, pushgateway, stack)
    try:
        await _drive_and_check(stack, test_namespace, unique, admin, bookie, w, prom, pushgateway, dead_s3)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def _drive_and_check(
    stack: Stack,
    ns: str,
    unique: str,
    admin: PulsarAdmin,
    bookie: BookieClient,
    w: WorkerHarness,
    prom: Prom,
    pushgateway: str,
    dead_s3: str,
) -> None:
    # Owner route: a live topic forgets two of its ledgers. Direct route: a topic whose metadata is gone.
    live = f"persistent://{ns}/prom-live-{unique}"
    dead = f"persistent://{ns}/prom-dead-{unique}"
    produce(stack.service_url, live, 16)
    produce(stack.service_url, dead, 11)
    live_ids = ml_ledger_ids(await admin.internal_stats(TopicName.parse(live)))
    dropped = await drop_ledgers_from_metadata(admin, stack.zookeeper_hosts, live, live_ids[:2])
    dead_ids = ml_ledger_ids(await admin.internal_stats(TopicName.parse(dead)))
    await delete_topic_metadata_keep_ledgers(admin, stack.zookeeper_hosts, dead)
    kept = [i for i in live_ids if i not in dropped]
    for lid in dropped:
        w.send(ml(live, lid))
    for lid in dead_ids:
        w.send(ml(dead, lid))
    # A forged message: a ledger of the live topic announced as another topic's. Rejected, never deleted.
    w.send(ml(f"persistent://{ns}/prom-victim-{unique}", kept[0]))
    # An offloaded copy on a configured target that is down: transient failures, retries, then the DLQ.
    ctx = OffloadContext.from_uuid(
        uuid.uuid4(), "aws-s3", {"bucket": "ops-dead", "region": "us-east-1", "serviceEndpoint": dead_s3}
    )
    w.send(
        PendingDeleteLedgerInfo(dead, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, 1, offload_context=ctx)
    )

    async def deleted() -> bool:
        return all([await bookie.get_metadata(i) is None for i in [*dropped, *dead_ids]])

    await eventually(deleted, timeout=120, what="the orphans deleted by the worker")

    async def settled() -> bool:
        return w.metric("ledger_deletion_dlq_total", reason="transient") >= 1 and (
            w.metric("ledger_deletion_rejected_total", reason="topic_mismatch") >= 1
        )

    await eventually(settled, timeout=120, what="the forged message rejected and the dead-S3 copy dead-lettered")
    assert await bookie.get_metadata(kept[0]) is not None, "a forged message deleted a live ledger"

    # The nightly jobs' pushes, as the Spark jobs make them: a successful replay, then a failed one (the
    # success time must survive it), and a successful audit with its orphans.
    nm.push(pushgateway, nm.JOB_REPLAY, nm.run_registry(failed=False, duration_s=42, rows={"deleted": 3, "in_use": 1}))
    nm.push(pushgateway, nm.JOB_REPLAY, nm.run_registry(failed=True, duration_s=7))
    nm.push(
        pushgateway,
        nm.JOB_AUDIT,
        nm.run_registry(
            failed=False, duration_s=99, rows={"orphan": 5, "in_use": 40}, orphans={"bookkeeper": (5, 3475)}
        ),
    )

    exprs = [(f"panel {t!r}", q) for t, q in dashboard_queries(json.loads(DASHBOARD.read_text()))]
    exprs += [(f"alert {r['alert']}", str(r["expr"])) for r in alert_rules(RULES)]

    # The bookie's series are checked like any other when it exports them (see the module docstring).
    bookie_exports = bookie_exports_metrics(stack)
    missing: list[str] = []

    async def all_series_present() -> bool:
        missing.clear()
        for where, expr in exprs:
            for sel in selectors(expr):
                if BOOKIE_ONLY.search(sel) and not bookie_exports:
                    continue
                if not prom.series(sel):
                    missing.append(f"{where}: {sel}")
        return not missing

    try:
        await eventually(all_series_present, timeout=90, interval=2, what="every selector's series scraped")
    except AssertionError:
        raise AssertionError("selectors matching no series:\n" + "\n".join(missing)) from None

    # Rates need two samples of a series born during the run: poll until every panel shows data.
    empty: list[str] = []
    checked_bookie = 0

    async def every_query_answers() -> bool:
        nonlocal checked_bookie
        empty.clear()
        checked_bookie = 0
        for where, expr in exprs:
            body = prom.query(expr)
            assert body["status"] == "success", f"{where}: {expr}: {body.get('error')}"
            if not bookie_exports and any(BOOKIE_ONLY.search(s) for s in selectors(expr)):
                checked_bookie += 1
            elif where.startswith("panel") and not body["data"]["result"]:
                empty.append(f"{where}: {expr}")
        return not empty

    try:
        await eventually(every_query_answers, timeout=60, interval=2, what="every panel query returning data")
    except AssertionError:
        raise AssertionError("panel queries returning nothing:\n" + "\n".join(empty)) from None
    # Without the bookie's metrics, the leak panels' BookKeeper queries still parse and run.
    assert bookie_exports or checked_bookie >= 3

    # The worker numbers seen through Prometheus are the worker's own.
    deleted_via_prom = prom.query('sum(ledger_deletion_deleted_total{job="ledger-deletion-worker",result="deleted"})')
    assert float(deleted_via_prom["data"]["result"][0]["value"][1]) == len(dropped) + len(dead_ids)

    # The two replay pushes came a moment apart: a scrape may have caught the first alone. Prometheus
    # must show the failure (the newest push) beside the success time the first one set.
    async def failure_beside_success() -> bool:
        success = prom.query(f'{nm.LAST_SUCCESS}{{job="{nm.JOB_REPLAY}"}}')["data"]["result"]
        failed = prom.query(f'{nm.FAILED}{{job="{nm.JOB_REPLAY}"}}')["data"]["result"]
        return bool(success) and bool(failed) and float(failed[0]["value"][1]) == 1.0

    await eventually(failure_beside_success, timeout=20, what="pushadd keeping the last success beside a failure")

    # The rules Prometheus loaded evaluate cleanly; the ones this run provokes are firing or pending.
    async def rules_evaluated() -> dict[str, str]:
        groups = prom.get("/api/v1/rules")["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        if len(rules) != len(alert_rules(RULES)) or any(not r.get("lastEvaluation", "").startswith("2") for r in rules):
            return {}
        bad = {r["name"]: r.get("lastError", "") for r in rules if r["health"] != "ok"}
        assert not bad, bad
        return {r["name"]: r["state"] for r in rules}

    provoked = ("LedgerDeletionRejectedMessages", "LedgerDeletionDLQGrowing", "LedgerDeletionNightlyFailed")

    # A rule sees a series from its first evaluation after the scrape that brought it: the provoked alerts are
    # waited for, each must become pending or firing.
    async def provoked_active() -> dict[str, str]:
        states = await rules_evaluated()
        return states if states and all(states[n] in ("pending", "firing") for n in provoked) else {}

    await eventually(rules_evaluated, timeout=30, what="every alert rule evaluated")
    states = await eventually(provoked_active, timeout=60, interval=1, what=f"{', '.join(provoked)} pending or firing")
    assert states["LedgerDeletionWorkerDown"] == "inactive", states
