"""The nightly DLQ replay on Spark local[2], against real dead letters a real worker parked while storage
was unreachable: report rows, deletions in BookKeeper, acknowledged and remaining backlog (exact), a
second run that is a no-op for resolved rows, a run killed with SIGKILL midway, and the pushed metrics."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.harness import WorkerHarness, create_ledgers, free_port, ml_info, pulsar_ml_metadata
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import REPO, Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import bookie_length
from tests.integration.nightly_fixtures import (
    bookie_proxy,
    dead_letter_worker,
    existing,
    publish_dead_letters,
    pushed,
    replay_backlog,
    replay_settings,
    start_in_own_group,
    start_pushgateway,
    wait_dlq,
)
from worker.broker.admin import PulsarAdmin
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo, encode
from worker.formats.topic_name import TopicName
from worker.nightly import replay as replay_module
from worker.nightly.replay import ReplayOptions, replay

# Real Spark jobs on a shared 2-core machine: minutes each, more under load.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]


def rows_of(spark: Any, report_dir: Path, run_id: str) -> list[dict[str, Any]]:
    from pyspark.sql import functions as F

    df = spark.read.parquet(str(report_dir)).where(F.col("run_id") == run_id)
    return [r.asDict() for r in df.collect()]


async def live_ledger(stack: Stack, admin: PulsarAdmin, topic: str) -> int:
    produce(stack.service_url, topic, 3)
    return ml_ledger_ids(await admin.internal_stats(TopicName.parse(topic)))[-1]


async def test_replay_decides_reports_and_acknowledges_exactly_the_final_ones(
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    tmp_path: Path,
    spark: Any,
    make_worker: WorkerFactory,
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"  # never existed: "gone" is provable
    orphans = create_ledgers(stack, 4, pulsar_ml_metadata(ghost))
    [foreign] = create_ledgers(stack, 1, pulsar_ml_metadata(f"persistent://{test_namespace}/other-{unique}"))
    live = f"persistent://{test_namespace}/live-{unique}"
    in_use = await live_ledger(stack, admin, live)

    proxy = bookie_proxy(stack)
    try:
        w = dead_letter_worker(make_worker, f"replay-{unique}", proxy)
        for lid in orphans:
            w.send(ml_info(ghost, lid))
        w.send(ml_info(ghost, orphans[0]))  # a duplicate
        w.send(ml_info(ghost, foreign))  # forged: the ledger belongs to another topic
        w.send(ml_info(live, in_use))
        w.send(ml_info(ghost, 0), raw=b"\x00not avro")
        await wait_dlq(w, 8)
        w.stop()
    finally:
        proxy.close()
    settings = replay_settings(w, stack)
    assert await replay_backlog(admin, settings) == 8
    reports = tmp_path / "reports"
    lengths = {lid: bookie_length(stack, lid) for lid in orphans}  # read before anything is deleted
    assert all(n > 0 for n in lengths.values()), lengths

    # Dry run: decided and reported; nothing deleted, nothing acknowledged.
    dry = replay(spark, settings, ReplayOptions(str(reports), dry_run=True))
    assert dry.read == 8
    assert dry.rows == {"would_delete": 4, "rejected": 1, "in_use": 1, "invalid": 1}
    assert dry.acknowledged == 0
    # Nothing deleted, nothing freed: the report says so per row.
    assert dry.freed_bytes == 0 and all(r["freed_bytes"] is None for r in rows_of(spark, reports, dry.run_id))
    assert await existing(stack, [*orphans, foreign, in_use]) == {*orphans, foreign, in_use}
    assert await replay_backlog(admin, settings) == 8

    s = replay(spark, settings, ReplayOptions(str(reports)))
    assert s.read == 8
    assert s.rows == {"deleted": 4, "rejected": 1, "in_use": 1, "invalid": 1}
    assert s.messages == {"deleted": 5, "rejected": 1, "in_use": 1, "invalid": 1}
    assert s.acknowledged == 7
    rows = {(r["ledger_id"], r["outcome"]): r for r in rows_of(spark, reports, s.run_id)}
    dup = rows[(orphans[0], "deleted")]
    assert dup["messages"] == 2 and len(dup["message_ids"]) == 2 and dup["final"]
    assert dup["topic"] == ghost and dup["component"] == "MANAGED_LEDGER" and dup["ledger_type"] == "LEDGER"
    assert dup["attempts"] == 2 and "attempts exhausted" in dup["last_error"]
    assert dup["first_seen"] is not None and dup["route"] == "direct"
    assert rows[(foreign, "rejected")]["reason"] == "topic_mismatch"
    assert not rows[(in_use, "in_use")]["final"]
    assert next(r for r in rows.values() if r["outcome"] == "invalid")["decode_error"]
    # Each deleted row records its ledger's metadata length; the summary sums them.
    assert {lid: rows[(lid, "deleted")]["freed_bytes"] for lid in orphans} == lengths
    assert all(r["freed_bytes"] is None for r in rows.values() if r["outcome"] != "deleted")
    assert (s.freed_bytes, s.freed_unknown) == (sum(lengths.values()), 0)
    assert f"({sum(lengths.values())} bytes)" in s.table()
    assert (reports / f"run_date={s.run_date}").is_dir()
    # BookKeeper: the orphans are gone, the in-use and the forged target untouched.
    assert await existing(stack, [*orphans, foreign, in_use]) == {foreign, in_use}
    assert await replay_backlog(admin, settings) == 1

    # Again: only the in-use ledger is read; nothing else happens.
    again = replay(spark, settings, ReplayOptions(str(reports)))
    assert again.read == 1
    assert again.rows == {"in_use": 1}
    assert again.acknowledged == 0
    assert await replay_backlog(admin, settings) == 1
    assert await existing(stack, [foreign, in_use]) == {foreign, in_use}


async def test_replay_killed_midway_then_rerun_finishes_and_pushes_metrics(
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    tmp_path: Path,
    spark: Any,
    make_worker: WorkerFactory,
) -> None:
    ghost = f"persistent://{test_namespace}/ghost-{unique}"
    orphans = create_ledgers(stack, 10, pulsar_ml_metadata(ghost))
    lengths = {lid: bookie_length(stack, lid) for lid in orphans}
    live = f"persistent://{test_namespace}/live-{unique}"
    in_use = await live_ledger(stack, admin, live)
    proxy = bookie_proxy(stack)
    try:
        w = dead_letter_worker(make_worker, f"kill-{unique}", proxy)
        for lid in orphans:
            w.send(ml_info(ghost, lid))
        w.send(ml_info(live, in_use))
        await wait_dlq(w, 11)
        w.stop()
    finally:
        proxy.close()
    # Slow deletes (one a second), so the kill lands between the first and the last.
    settings = replay_settings(w, stack, deletes_per_second=1, delete_burst=1)
    cfg = tmp_path / "replay.yaml"
    cfg.write_text(yaml.safe_dump(settings.model_dump(mode="json")))
    reports = tmp_path / "reports"
    cmd = [sys.executable, "-m", "worker.cli", "replay-dlq", "--config", str(cfg), "--master", "local[2]"]
    proc = start_in_own_group([*cmd, "--report-dir", str(reports)], tmp_path / "killed.log", REPO)
    try:

        async def midway() -> bool:
            assert proc.poll() is None, (tmp_path / "killed.log").read_text()[-3000:]
            return len(await existing(stack, orphans)) < len(orphans)

        await eventually(midway, timeout=600, interval=0.3, what="the first deletion")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its JVM, at once
        proc.wait(timeout=30)
    left = await existing(stack, orphans)
    assert 0 < len(left) < len(orphans), "the kill did not land midway"
    assert in_use in await existing(stack, [in_use])
    assert await replay_backlog(admin, settings) == 11  # nothing acknowledged before the report

    gw_port = free_port()
    gw = start_pushgateway(gw_port)
    try:
        from worker.cli import main

        # In process (the session fixture's SparkSession is reused; the command leaves it running).
        rc = main([*cmd[3:], "--report-dir", str(reports), "--pushgateway", f"127.0.0.1:{gw_port}"])
        assert rc == 0
        text = pushed(gw_port)
    finally:
        gw.terminate()
        gw.wait(timeout=10)
    assert await existing(stack, [*orphans, in_use]) == {in_use}
    assert await replay_backlog(admin, settings) == 1
    from pyspark.sql import functions as F

    last = (
        spark.read.parquet(str(reports / "replay"))
        .groupBy("run_id")
        .agg(F.max("decided_at").alias("t"))
        .orderBy(F.col("t").desc())
        .first()["run_id"]
    )
    rows = rows_of(spark, reports / "replay", last)
    outcomes = sorted(r["outcome"] for r in rows)
    assert outcomes.count("in_use") == 1
    assert outcomes.count("deleted") == len(left)
    assert outcomes.count("already_gone") == len(orphans) - len(left)
    line = f'ledger_deletion_nightly_rows{{instance="",job="ledger_deletion_replay",outcome="deleted"}} {len(left)}'
    assert line in text, text
    assert 'ledger_deletion_nightly_failed{instance="",job="ledger_deletion_replay"} 0' in text
    # The rerun freed what the killed run left: the pushed gauge is the sum of those ledgers' lengths.
    freed = sum(lengths[lid] for lid in left)
    assert f'ledger_deletion_replay_freed_bytes{{instance="",job="ledger_deletion_replay"}} {freed}' in text, text
    assert sum(r["freed_bytes"] or 0 for r in rows) == freed


def test_first_run_on_an_empty_dlq_reports_nothing(stack: Stack, unique: str, tmp_path: Path, spark: Any) -> None:
    """No dead letter, no report written before: no Parquet file exists to read back (Spark cannot infer a
    schema from nothing), and the run must still complete with an empty summary."""
    from worker.settings import load_settings

    settings = load_settings(
        None,
        pulsar={"service_url": stack.service_url, "admin_url": stack.admin_url},
        topics={"dlq": f"persistent://pulsar/system/__never-written-{unique}-DLQ"},
        zookeeper={"metadata_store_url": f"zk:{stack.zookeeper_hosts}"},
    )
    s = replay(spark, settings, ReplayOptions(str(tmp_path / "fresh-reports")))
    assert (s.read, s.rows, s.acknowledged) == (0, {}, 0)


def _s3(stack: Stack) -> Any:
    import boto3

    return boto3.client(
        "s3",
        endpoint_url=stack.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _objects_left(s3: Any, bucket: str, keys: list[str]) -> list[str]:
    left = []
    for k in keys:
        try:
            s3.head_object(Bucket=bucket, Key=k)
            left.append(k)
        except s3.exceptions.ClientError:
            pass
    return left


async def test_a_forged_copy_published_first_settles_only_itself(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, tmp_path: Path, spark: Any
) -> None:
    """Two dead letters for the same offloaded ledger: a forged one (same topic, ledger and offload uuid,
    another bucket), published first, and the genuine one; plus a copy naming another topic. Each is
    decided on its own content and acknowledged by its own verdict: the genuine copy is deleted."""
    import uuid

    ghost = f"persistent://{test_namespace}/offghost-{unique}"  # never existed: the copy is garbage
    lid = int(unique[:7], 16)
    s3 = _s3(stack)
    ctx = OffloadContext.from_uuid(
        uuid.uuid4(), "aws-s3", {"bucket": stack.s3_bucket, "region": "us-east-1", "serviceEndpoint": stack.s3_endpoint}
    )
    keys = [f"{ctx.uuid}-ledger-{lid}", f"{ctx.uuid}-ledger-{lid}-index"]
    for k in keys:
        s3.put_object(
            Bucket=stack.s3_bucket,
            Key=k,
            Body=b"offloaded",
            Metadata={"ManagedLedgerName": TopicName.parse(ghost).managed_ledger_name},
        )
    elsewhere = OffloadContext(
        ctx.uid_msb, ctx.uid_lsb, ctx.driver_name, {**ctx.driver_metadata, "bucket": "elsewhere"}
    )

    def msg(topic: str, c: OffloadContext) -> bytes:
        info = PendingDeleteLedgerInfo(
            topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, lid, offload_context=c
        )
        return encode(info)

    h = WorkerHarness(stack, tmp_path, f"forged-{unique}")
    settings = replay_settings(h, stack)
    other = f"persistent://{test_namespace}/offother-{unique}"
    forged_target, forged_topic, genuine = publish_dead_letters(
        stack, settings, [msg(ghost, elsewhere), msg(other, ctx), msg(ghost, ctx)]
    )
    reports = tmp_path / "reports"
    s = replay(spark, settings, ReplayOptions(str(reports)))
    assert s.read == 3
    assert s.acknowledged == 3
    by_id = {m: r for r in rows_of(spark, reports, s.run_id) for m in r["message_id_strs"]}
    assert (by_id[genuine]["outcome"], by_id[genuine]["message_id_strs"]) == ("deleted", [genuine])
    assert (by_id[forged_target]["outcome"], by_id[forged_target]["reason"]) == ("rejected", "unknown_offload_target")
    # The copy naming another topic is in another partition (rows are partitioned by topic), decided
    # concurrently with the genuine one: it finds the objects and is rejected for the topic, or finds them
    # already deleted by the genuine claim. Either way it deleted nothing and was settled by its own verdict.
    other = (by_id[forged_topic]["outcome"], by_id[forged_topic]["reason"])
    assert other in (("rejected", "topic_mismatch"), ("already_gone", "")), other
    expected = (
        {"deleted": 1, "rejected": 2} if other[0] == "rejected" else {"deleted": 1, "rejected": 1, "already_gone": 1}
    )
    assert s.rows == expected, s.rows
    assert _objects_left(s3, stack.s3_bucket, keys) == []
    assert await replay_backlog(admin, settings) == 0


async def test_a_report_that_does_not_read_back_whole_acknowledges_nothing(
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    tmp_path: Path,
    spark: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Rows settle on the strength of the report: one of its files lost between the write and the
    read-back (a volume that is not what it seems, a store that lost a part) and the run acknowledges
    nothing, and says so."""
    # Ledgers that never existed, of topics that never existed: every one final (already_gone), each
    # topic in a partition of its own as far as hashing allows, so the report has several files.
    infos = [ml_info(f"persistent://{test_namespace}/lost-{unique}-{i}", 900_000_000 + i) for i in range(6)]
    h = WorkerHarness(stack, tmp_path, f"lost-{unique}")
    settings = replay_settings(h, stack)
    publish_dead_letters(stack, settings, [encode(i) for i in infos])
    reports = tmp_path / "reports"

    def lose_a_file(path: str) -> None:
        parts = sorted(Path(path).glob("run_date=*/*.parquet"))
        assert len(parts) >= 2, parts
        parts[0].unlink()

    monkeypatch.setattr(replay_module, "_report_written", lose_a_file)
    with pytest.raises(replay_module.ReportNotReadBack) as e:
        replay(spark, settings, ReplayOptions(str(reports), partitions=8))
    assert "nothing acknowledged" in str(e.value)
    assert await replay_backlog(admin, settings) == 6

    # The report readable again: the next run settles them all.
    monkeypatch.undo()
    s = replay(spark, settings, ReplayOptions(str(reports), partitions=8))
    assert s.rows == {"already_gone": 6} and s.acknowledged == 6
    assert await replay_backlog(admin, settings) == 0
