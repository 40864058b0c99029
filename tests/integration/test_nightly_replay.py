"""The nightly DLQ replay on Spark local[2], against the real stack: real dead letters (storage cut through
a loopback proxy while the worker tried; in-use, forged and duplicate messages), the replay's Parquet
report, the deletions in BookKeeper, and the replay subscription's backlog before and after."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, Stack
from tests.integration.helpers import TcpProxy, count_from_earliest, eventually, ml_ledger_ids, produce
from tests.integration.worker_harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from worker.bookkeeper import BookieClient
from worker.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.pulsar_admin import PulsarAdmin
from worker.settings import Settings, load_settings
from worker.topic_name import TopicName

pytestmark = pytest.mark.integration
pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed (make test installs it)")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from worker.nightly import local_spark_environment

    local_spark_environment()
    from pyspark.sql import SparkSession

    s = (
        SparkSession.builder.master("local[2]")
        .appName("ldw-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    yield s
    s.stop()


def ml_info(topic: str, ledger_id: int) -> PendingDeleteLedgerInfo:
    return PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id)


async def backlog(admin: PulsarAdmin, settings: Settings) -> int:
    st = await admin.stats(TopicName.parse(settings.topics.dlq))
    return int(st["subscriptions"][settings.topics.dlq_replay_subscription]["msgBacklog"])


def fill_dlq(
    stack: Stack, tmp_path: Path, name: str, infos: list[PendingDeleteLedgerInfo], harnesses: list[WorkerHarness]
) -> Settings:
    """Real dead letters: the worker tries each message while BookKeeper is unreachable (a loopback proxy
    that refuses), runs out of attempts and dead-letters them. Returns settings that reach BookKeeper."""
    host, port = stack.bookie_http_url.removeprefix("http://").split(":")
    proxy = TcpProxy(host, int(port))
    try:
        w = WorkerHarness(
            stack,
            tmp_path,
            name,
            bookkeeper={"http_url": proxy.url, "request_timeout_s": 2},
            worker={"max_attempts": 2, "backoff_initial_s": 0.3, "backoff_max_s": 0.5},
        )
        harnesses.append(w)
        w.start()
        for i in infos:
            w.send(i)
        deadline = time.monotonic() + 90
        while w.metric("ledger_deletion_dlq_total") < len(infos):
            assert time.monotonic() < deadline, "the DLQ was not filled"
            time.sleep(0.5)
        w.stop()
    finally:
        proxy.close()
    return load_settings(w.config_path, bookkeeper={"http_url": stack.bookie_http_url})


def report(spark: Any, report_dir: str, run_id: str) -> dict[tuple[str, int], Any]:
    rows = spark.read.parquet(report_dir).where(f"run_id = '{run_id}'").collect()
    return {(r.ledger_type, r.ledger_id): r for r in rows}


async def test_replay_settles_exactly_the_final_outcomes(
    spark: Any,
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    bookie: BookieClient,
    tmp_path: Path,
    harnesses: list[WorkerHarness],
) -> None:
    from worker.nightly.replay import ReplayOptions, replay

    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    orphans = create_ledgers(stack, 3, pulsar_ml_metadata(ghost))
    live_topic = f"persistent://{test_namespace}/live-{unique}"
    produce(stack.service_url, live_topic, 12)
    live = ml_ledger_ids(await admin.internal_stats(TopicName.parse(live_topic)))[:2]
    [foreign_victim] = create_ledgers(stack, 1, pulsar_ml_metadata(f"persistent://{test_namespace}/x-{unique}"))
    forged = ml_info(f"persistent://{test_namespace}/y-{unique}", foreign_victim)
    infos = [ml_info(ghost, lid) for lid in orphans] + [ml_info(ghost, orphans[0])]  # a duplicate
    infos += [ml_info(live_topic, lid) for lid in live] + [forged]
    settings = fill_dlq(stack, tmp_path, f"replay-{unique}", infos, harnesses)
    assert await backlog(admin, settings) == 7

    # A dry run first: decides and reports, deletes and acknowledges nothing.
    dry = replay(spark, settings, ReplayOptions(report_dir=str(tmp_path / "dry"), dry_run=True))
    assert dry["ledgers"] == {"would_delete": 3, "in_use": 2, "rejected": 1}
    assert dry["acknowledged_messages"] == 0
    assert all([await bookie.get_metadata(lid) is not None for lid in orphans])
    assert await backlog(admin, settings) == 7

    out = str(tmp_path / "reports")
    s1 = replay(spark, settings, ReplayOptions(report_dir=out))
    assert s1["ledgers"] == {"deleted": 3, "in_use": 2, "rejected": 1}
    rows = report(spark, out, s1["run_id"])
    assert {k[1]: r.outcome for k, r in rows.items()} == {
        **{lid: "deleted" for lid in orphans},
        **{lid: "in_use" for lid in live},
        foreign_victim: "rejected",
    }
    assert len(rows[("LEDGER", orphans[0])].message_ids) == 2  # deduplicated, every message id kept
    assert rows[("LEDGER", foreign_victim)].reason == "topic_mismatch"
    assert rows[("LEDGER", live[0])].attempts == 2 and rows[("LEDGER", live[0])].last_error
    assert rows[("LEDGER", live[0])].first_seen is not None
    assert rows[("LEDGER", live[0])].topic == live_topic
    # Acknowledged: exactly the messages of final outcomes (3 + the duplicate + the forged one).
    assert s1["acknowledged_messages"] == 5

    async def drained() -> bool:
        return await backlog(admin, settings) == 2

    await eventually(drained, timeout=30, what="the replay subscription's backlog down by exactly 5")
    for lid in orphans:
        assert await bookie.get_metadata(lid) is None
    for lid in [*live, foreign_victim]:
        assert await bookie.get_metadata(lid) is not None
    assert count_from_earliest(stack.service_url, live_topic) == 12

    # The next night: the resolved rows are gone from the subscription; only the in-use ones come back.
    s2 = replay(spark, settings, ReplayOptions(report_dir=out))
    assert s2["ledgers"] == {"in_use": 2} and s2["acknowledged_messages"] == 0
    assert await backlog(admin, settings) == 2


async def test_replay_killed_midway_then_rerun_finishes_and_loses_nothing(
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    bookie: BookieClient,
    tmp_path: Path,
    harnesses: list[WorkerHarness],
) -> None:
    import yaml

    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    orphans = create_ledgers(stack, 12, pulsar_ml_metadata(ghost))
    live_topic = f"persistent://{test_namespace}/live-{unique}"
    produce(stack.service_url, live_topic, 12)
    live = ml_ledger_ids(await admin.internal_stats(TopicName.parse(live_topic)))[:2]
    infos = [ml_info(ghost, lid) for lid in orphans] + [ml_info(live_topic, lid) for lid in live]
    settings = fill_dlq(stack, tmp_path, f"kill-{unique}", infos, harnesses)
    # The replay's own config: real BookKeeper, and a slow storage budget so the kill lands midway.
    cfg = settings.model_dump(mode="json")
    cfg["worker"]["deletes_per_second"] = 2
    cfg["worker"]["delete_burst"] = 1
    path = tmp_path / "replay.yaml"
    path.write_text(yaml.safe_dump(cfg))
    cmd = [sys.executable, "-m", "worker.cli", "replay-dlq", "--config", str(path), "--master", "local[2]",
           "--report-dir", str(tmp_path / "reports")]  # fmt: skip
    first = subprocess.Popen(  # noqa: ASYNC220 - killed below, as a crash would
        cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:

        async def some_deleted() -> bool:
            return sum([await bookie.get_metadata(lid) is None for lid in orphans]) >= 2

        await eventually(some_deleted, timeout=120, what="the first deletions of the replay")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the driver and its Python workers, as a node failure would
        first.wait(30)
    deleted_before = sum([await bookie.get_metadata(lid) is None for lid in orphans])
    assert 2 <= deleted_before < len(orphans), "the kill did not land midway"
    assert await backlog(admin, settings) == len(infos)  # nothing acknowledged before the report

    rerun = await asyncio.to_thread(subprocess.run, cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert "acknowledged messages" in rerun.stdout
    for lid in orphans:
        assert await bookie.get_metadata(lid) is None
    for lid in live:
        assert await bookie.get_metadata(lid) is not None

    async def only_in_use_left() -> bool:
        return await backlog(admin, settings) == len(live)

    await eventually(only_in_use_left, timeout=30, what="only the in-use dead letters left")
