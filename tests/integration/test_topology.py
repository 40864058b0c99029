"""Topology creation under concurrency, against the real broker: many starters on queue topics that do
not exist yet (several `send` commands, phase-1 senders or worker replicas starting at once) all succeed,
and the topology is complete afterwards."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testkit.admin import StagingAdmin
from tests.conftest import REPO, Stack
from tests.integration.helpers import read_pending
from worker.backends.http import new_session
from worker.broker.admin import PulsarAdmin
from worker.broker.topology import ensure_topology
from worker.formats.message import AVRO_SCHEMA
from worker.formats.topic_name import TopicName
from worker.settings import Settings, TopicsSettings, load_settings

pytestmark = pytest.mark.integration


def fresh_topics(unique: str, parallelism: int = 4) -> dict[str, object]:
    # A namespace nobody has created yet, so the namespace PUT races too.
    base = f"persistent://public/ldw-topo-{unique}/__ledger_deletion"
    return {"pending": base, "retry": f"{base}-RETRY", "dlq": f"{base}-DLQ", "parallelism": parallelism}


async def assert_complete(admin: PulsarAdmin, topics: TopicsSettings) -> None:
    pending, retry, dlq = (TopicName.parse(t) for t in (topics.pending, topics.retry, topics.dlq))
    assert await admin.partitions(pending) == topics.parallelism
    for i in range(topics.parallelism):
        assert topics.subscription in await admin.subscriptions(pending.partition(i)), f"partition {i}"
    assert topics.subscription in await admin.subscriptions(retry)
    assert topics.dlq_replay_subscription in await admin.subscriptions(dlq)
    for t in (pending, retry, dlq):
        info = await admin.schema_info(t)
        assert info is not None and info["type"] == "AVRO", (t, info)
        assert json.loads(info["data"]) == AVRO_SCHEMA


async def test_concurrent_starters_on_fresh_topics_all_succeed(stack: Stack, unique: str) -> None:
    settings = load_settings(None, topics=fresh_topics(unique))

    async def starter() -> None:
        # One session each: separate connections, like separate processes.
        async with new_session(30) as s:
            await ensure_topology(StagingAdmin(stack.admin_url, s), settings.topics)

    results = await asyncio.gather(*(starter() for _ in range(24)), return_exceptions=True)
    errors = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    assert errors == [], f"{len(errors)} of 24 starters failed: {errors[:3]}"
    async with new_session(30) as s:
        await assert_complete(StagingAdmin(stack.admin_url, s), settings.topics)


def test_concurrent_send_commands_on_fresh_topics_all_succeed(stack: Stack, unique: str, tmp_path: Path) -> None:
    cfg = {
        "pulsar": {"service_url": stack.service_url, "admin_url": stack.admin_url},
        "topics": fresh_topics(unique, parallelism=2),
        "worker": {"send_delay_s": 1},
        "logging": {"level": "WARNING"},
    }
    path = tmp_path / "worker.yaml"
    path.write_text(yaml.safe_dump(cfg))
    n = 16
    topic = f"persistent://public/ldw-topo-{unique}/data"
    procs = [
        subprocess.Popen(
            [
                *(sys.executable, "-m", "worker.cli", "send", "--config", str(path), "--topic", topic),
                *("--ledger-id", str(10**12 + i), "--component", "MANAGED_LEDGER"),
            ],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(n)
    ]
    outs = [(p.wait(timeout=240), *p.communicate()) for p in procs]
    failed = [(rc, err.strip().splitlines()[-1:]) for rc, _, err in outs if rc != 0]
    assert failed == [], f"{len(failed)} of {n} sends failed: {failed[:3]}"
    settings: Settings = load_settings(path)

    async def check() -> None:
        async with new_session(30) as s:
            await assert_complete(StagingAdmin(stack.admin_url, s), settings.topics)

    asyncio.run(check())
    assert sorted(i.ledger_id for i in read_pending(stack, settings)) == [10**12 + i for i in range(n)]
