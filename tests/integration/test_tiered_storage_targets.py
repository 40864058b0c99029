"""Offload targets the worker cannot see must never make an offloaded copy look "already gone".

S3 answers a HEAD on an object of a missing bucket with a bare 404 (a HEAD has no body to say
NoSuchBucket), exactly as for a missing object; a filesystem base path that is gone or unmounted holds
nothing either. Both must stop the worker at start, and make a decision in flight transient, against the
local stack's real S3 server and a real mount.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from testkit.harness import WorkerHarness
from testkit.topics import eventually, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.offload_helpers import offload_contexts, offload_topic, settings
from worker.broker.admin import PulsarAdmin
from worker.core.decision import Outcome
from worker.core.offload_driver_metadata import driver_metadata
from worker.daemon.decider import open_decider
from worker.errors import StartupRefused
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName
from worker.operations.purge import Collector
from worker.settings import S3Target, Settings

pytestmark = pytest.mark.integration


def target(stack: Stack, bucket: str) -> dict[str, Any]:
    return {
        "bucket": bucket,
        "endpoint": stack.s3_endpoint,
        "region": "us-east-1",
        "access_key_id": "testing",
        "secret_access_key": "testing",
    }


def s3_message(stack: Stack, topic: str, bucket: str) -> PendingDeleteLedgerInfo:
    """An offloaded copy of a topic that does not exist (direct route: nothing is in use), as the offloader
    names it: every object of it is absent."""
    t = S3Target.model_validate(target(stack, bucket))
    ctx = OffloadContext.from_uuid(uuid.uuid4(), "aws-s3", driver_metadata(t))
    return PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, 7, offload_context=ctx
    )


def fs_message(topic: str) -> PendingDeleteLedgerInfo:
    ctx = OffloadContext.from_uuid(uuid.uuid4(), "filesystem", {})
    return PendingDeleteLedgerInfo(
        topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, 7, offload_context=ctx
    )


async def decide_once(cfg: Settings, info: PendingDeleteLedgerInfo) -> Outcome:
    async with open_decider(cfg, dry_run=True) as decider:
        return (await decider.decide_info(info)).outcome


# ---- S3 ------------------------------------------------------------------------------------------------


async def test_a_missing_bucket_refuses_the_start(stack: Stack, test_namespace: str, unique: str) -> None:
    missing = f"no-such-bucket-{unique}"
    cfg = settings(stack, s3_targets=[target(stack, stack.s3_bucket), target(stack, missing)])
    info = s3_message(stack, f"persistent://{test_namespace}/gone-{unique}", missing)
    with pytest.raises(StartupRefused) as refused:
        outcome = await decide_once(cfg, info)
        pytest.fail(f"started with a missing bucket; an offloaded copy in it was settled {outcome}")
    msg = str(refused.value)
    assert "offload.s3_targets[1]" in msg and missing in msg and stack.s3_endpoint in msg and "404" in msg, msg


def test_the_daemon_refuses_to_start_naming_the_missing_bucket(
    stack: Stack, test_namespace: str, unique: str, make_worker: WorkerFactory
) -> None:
    missing = f"no-such-bucket-{unique}"
    w = make_worker(f"nobucket-{unique}", offload={"s3_targets": [target(stack, missing)]}, start=False)
    try:
        w.start(timeout=60)
    except AssertionError as e:
        assert "worker exited with 2" in str(e), e
        assert "offload.s3_targets[0]" in w.log_text() and missing in w.log_text(), w.log_tail()
        return
    # Reached only when the start was not refused: show what that costs.
    w.send(s3_message(stack, f"persistent://{test_namespace}/gone-{unique}", missing))

    async def settled() -> float:
        return w.metric("ledger_deletion_deleted_total", result="already_gone")

    n = asyncio.run(eventually(settled, timeout=30, what="the offload message settled"))
    pytest.fail(f"the daemon started with a missing bucket and settled {n:g} offload message(s) as already_gone")


async def test_the_nightly_jobs_refuse_to_start_naming_the_missing_bucket(
    stack: Stack, unique: str, tmp_path: Path, spark: Any, admin: PulsarAdmin
) -> None:
    """The replay and the audit check every configured target on their driver before they read anything:
    a dead letter for a copy in the misnamed bucket is left on the DLQ, never settled as already gone."""
    from tests.integration.nightly_fixtures import publish_dead_letters, replay_backlog, replay_settings
    from worker.formats.message import encode
    from worker.nightly.audit import run_audit
    from worker.nightly.replay import ReplayOptions, replay

    missing = f"no-such-bucket-{unique}"
    h = WorkerHarness(stack, tmp_path, f"nightbucket-{unique}")  # its configuration only: keys from files
    good = h.config["offload"]["s3_targets"][0]
    h.config["offload"]["s3_targets"] = [good, {**good, "bucket": missing}]
    cfg = replay_settings(h, stack)
    publish_dead_letters(stack, cfg, [encode(s3_message(stack, f"persistent://public/default/gone-{unique}", missing))])
    with pytest.raises(StartupRefused) as refused:
        replay(spark, cfg, ReplayOptions(str(tmp_path / "replay")))
    msg = str(refused.value)
    assert "offload.s3_targets[1]" in msg and missing in msg and "no such bucket" in msg, msg
    assert await replay_backlog(admin, cfg) == 1  # left for a night with the bucket named right
    assert not (tmp_path / "replay").exists()

    with pytest.raises(StartupRefused) as refused:
        run_audit(spark, cfg, report_dir=str(tmp_path / "audit"), run_id=unique, min_age_s=3600)
    msg = str(refused.value)
    assert "offload.s3_targets[1]" in msg and missing in msg, msg
    assert not (tmp_path / "audit").exists()  # refused before the ledgers' half ran


async def test_a_bucket_that_disappears_in_flight_is_transient(
    stack: Stack, test_namespace: str, unique: str, s3: Any
) -> None:
    bucket = f"ldw-vanishing-{unique}"
    s3.create_bucket(Bucket=bucket)
    cfg = settings(stack, s3_targets=[target(stack, bucket)])
    info = s3_message(stack, f"persistent://{test_namespace}/gone-{unique}", bucket)
    try:
        async with open_decider(cfg, dry_run=True) as decider:
            # Present and empty: the copy is truly gone.
            assert (await decider.decide_info(info)).outcome is Outcome.ALREADY_GONE
            s3.delete_bucket(Bucket=bucket)
            res = await decider.decide_info(info)
            assert res.outcome is Outcome.TRANSIENT, f"a vanished bucket was settled {res.outcome}"
            assert res.stage == "tiered_storage" and bucket in res.reason, res
            s3.create_bucket(Bucket=bucket)  # back (an endpoint routed right again): gone is gone
            assert (await decider.decide_info(info)).outcome is Outcome.ALREADY_GONE
    finally:
        try:
            s3.delete_bucket(Bucket=bucket)
        except s3.exceptions.ClientError:
            pass


async def test_the_driver_metadata_built_for_a_target_is_what_the_offloader_writes(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin
) -> None:
    """purge-topic and audit --send build the map the broker would have written: the same keys, the same
    values, for the local stack's target (the broker's managedLedgerOffload* settings name the same)."""
    topic = f"persistent://{test_namespace}/drvmd-{unique}"
    produce(stack.service_url, topic, 8)
    await offload_topic(admin, TopicName.parse(topic))
    ctxs = await offload_contexts(stack, TopicName.parse(topic))
    assert ctxs
    built = driver_metadata(S3Target.model_validate(target(stack, stack.s3_bucket)))
    for ctx in ctxs.values():
        assert ctx.driver_name == "aws-s3"
        assert dict(ctx.driver_metadata) == built
    # purge-topic without the metadata store knows only the uuids: its messages carry the same map.
    s = settings(stack, s3_targets=[target(stack, stack.s3_bucket)])
    plan = await Collector(admin, None, s.offload, worker=s.worker).collect(TopicName.parse(topic))
    queued = {i.ledger_id: i.offload_context for i in plan.infos if i.ledger_type is LedgerType.OFFLOAD_LEDGER}
    assert set(queued) == set(ctxs)
    for lid, ctx in ctxs.items():
        assert queued[lid] == ctx


# ---- filesystem ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", ["absent", "a file"])
async def test_a_filesystem_base_path_that_is_not_a_directory_refuses_the_start(
    stack: Stack, test_namespace: str, unique: str, tmp_path: Path, shape: str
) -> None:
    base = tmp_path / "offload"
    if shape == "a file":
        base.write_text("not a directory")
    cfg = settings(stack, filesystem_base_path=str(base))
    with pytest.raises(StartupRefused) as refused:
        outcome = await decide_once(cfg, fs_message(f"persistent://{test_namespace}/gone-{unique}"))
        pytest.fail(f"started with a base path that is {shape}; an offloaded copy under it was settled {outcome}")
    assert "offload.filesystem_base_path" in str(refused.value) and str(base) in str(refused.value), refused.value


async def test_a_filesystem_base_path_removed_in_flight_is_transient(
    stack: Stack, test_namespace: str, unique: str, tmp_path: Path
) -> None:
    base = tmp_path / "offload"
    base.mkdir()
    cfg = settings(stack, filesystem_base_path=str(base))
    info = fs_message(f"persistent://{test_namespace}/gone-{unique}")
    async with open_decider(cfg, dry_run=True) as decider:
        assert (await decider.decide_info(info)).outcome is Outcome.ALREADY_GONE
        shutil.rmtree(base)
        res = await decider.decide_info(info)
        assert res.outcome is Outcome.TRANSIENT, f"a removed base path was settled {res.outcome}"
        assert res.stage == "tiered_storage", res


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs mounted on a directory (root only: skipped where mounting is not permitted)."""
    base = tmp_path / "mnt"
    base.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "ldw-test", str(base)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs is not permitted here")
    try:
        yield base
    finally:
        subprocess.run(["umount", str(base)], capture_output=True)


async def test_a_filesystem_unmounted_in_flight_is_transient(
    stack: Stack, test_namespace: str, unique: str, mounted: Path
) -> None:
    """Unmounted, the base path is still a directory (the empty mount point): only its device changed."""
    cfg = settings(stack, filesystem_base_path=str(mounted))
    info = fs_message(f"persistent://{test_namespace}/gone-{unique}")
    async with open_decider(cfg, dry_run=True) as decider:
        assert (await decider.decide_info(info)).outcome is Outcome.ALREADY_GONE
        await asyncio.to_thread(subprocess.run, ["umount", str(mounted)], check=True)
        assert await asyncio.to_thread(mounted.is_dir)  # the mount point is still there, empty
        res = await decider.decide_info(info)
        assert res.outcome is Outcome.TRANSIENT, f"an unmounted base path was settled {res.outcome}"
        assert res.stage == "tiered_storage" and str(mounted) in res.reason, res
