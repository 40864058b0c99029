"""Pulsar policies that would drop queued deletions, on the real broker: ``run`` refuses to start naming
the policy, ``topology`` makes the queue namespace safe, and ``run`` then starts. Each test has its own
queue namespace (public/ldw-qpol-*), so no policy set here reaches another test's topics."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from testkit.admin import StagingAdmin
from testkit.harness import WorkerHarness
from tests.conftest import REPO, Stack
from worker.backends.http import new_session
from worker.broker.preflight import check_queue_policies
from worker.broker.topology import ensure_queue_policies, ensure_topology
from worker.core.queue_policies import EVICTION
from worker.errors import StartupRefused
from worker.formats.topic_name import TopicName
from worker.settings import load_settings

pytestmark = pytest.mark.integration


def _harness(stack: Stack, tmp_path: Path, unique: str) -> tuple[WorkerHarness, str]:
    ns = f"public/ldw-qpol-{unique}"
    base = f"persistent://{ns}/__ledger_deletion"
    topics = {"pending": base, "retry": f"{base}-RETRY", "dlq": f"{base}-DLQ", "parallelism": 2}
    return WorkerHarness(stack, tmp_path, f"qpol-{unique}", topics=topics), ns


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


async def _until(check: Any, what: str, timeout: float = 30) -> None:
    """Topic policies reach the broker through its event topic: wait, boundedly, until ``check()``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, f"not in effect after {timeout} s: {what}"
        await asyncio.sleep(0.3)


def test_a_message_ttl_refuses_run_until_topology_makes_it_safe(stack: Stack, unique: str, tmp_path: Path) -> None:
    w, ns = _harness(stack, tmp_path, unique)
    settings = load_settings(w.config_path)
    pending = TopicName.parse(settings.topics.pending)

    async def ttl() -> int:
        async with new_session(30) as s:
            return int(await StagingAdmin(stack.admin_url, s).topic_policy(pending, "messageTTL", applied=True) or 0)

    async def with_ttl() -> None:
        async with new_session(30) as s:
            admin = StagingAdmin(stack.admin_url, s)
            await ensure_topology(admin, settings.topics)
            await admin.set_namespace_policy(ns, "messageTTL", 3600)
        await _until(lambda: _is(ttl, 3600), "messageTTL 3600")

    asyncio.run(with_ttl())
    refused = _cli("run", "--config", str(w.config_path), timeout=90)
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "messageTTL is 3600 s on persistent://" in refused.stderr, refused.stderr[-3000:]
    assert "ledger-deletion-worker topology" in refused.stderr

    made = _cli("topology", "--config", str(w.config_path))
    assert made.returncode == 0, made.stderr[-3000:]
    assert asyncio.run(ttl()) == 0
    try:
        w.start(90)
    finally:
        w.close()


async def _is(read: Any, value: Any) -> bool:
    return bool(await read() == value)


async def test_every_dropping_policy_is_named_and_topology_removes_them(
    stack: Stack, unique: str, tmp_path: Path
) -> None:
    w, ns = _harness(stack, tmp_path, unique)
    topics = load_settings(w.config_path).topics
    dlq, retry = TopicName.parse(topics.dlq), TopicName.parse(topics.retry)
    async with new_session(30) as s:
        admin = StagingAdmin(stack.admin_url, s)
        await ensure_topology(admin, topics)
        # Topic level (overrides the namespace), namespace level, and the quota and inactive-topic kinds.
        await admin._call("POST", f"/admin/v2/{dlq.rest_path}/messageTTL", params={"messageTTL": "600"})
        await admin.set_namespace_policy(ns, "subscriptionExpirationTime", 1440)
        await admin.set_namespace_policy(
            ns,
            "backlogQuota",
            {"limitSize": 10 * 2**30, "limitTime": -1, "policy": EVICTION},
            {"backlogQuotaType": "destination_storage"},
        )
        await admin.set_namespace_policy(
            ns,
            "inactiveTopicPolicies",
            {
                "inactiveTopicDeleteMode": "delete_when_subscriptions_caught_up",
                "maxInactiveDurationSeconds": 600,
                "deleteWhileInactive": True,
            },
        )

        async def dlq_ttl_set() -> bool:
            return int(await admin.topic_policy(dlq, "messageTTL", applied=True) or 0) == 600

        await _until(dlq_ttl_set, "topic-level messageTTL on the DLQ")
        with pytest.raises(StartupRefused) as e:
            await check_queue_policies(admin, topics)
        msg = str(e.value)
        assert f"messageTTL is 600 s on {dlq}" in msg
        assert f"messageTTL is 600 s on {retry}" not in msg  # the topic-level one is the DLQ's only
        assert f"subscriptionExpirationTime is 1440 min on {ns}" in msg
        assert f"backlogQuota destination_storage has policy {EVICTION} on {retry}" in msg
        assert f"inactiveTopicPolicies delete {retry}" in msg

        await ensure_queue_policies(admin, topics)
        await check_queue_policies(admin, topics)
        # The operator's storage limit stays; only what happens past it changed.
        quota = (await admin.topic_policy(retry, "backlogQuotaMap", applied=True))["destination_storage"]
        assert (quota["limitSize"], quota["policy"]) == (10 * 2**30, "producer_request_hold")
