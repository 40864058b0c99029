"""The local stack is real: real ledgers in a real bookie, with Pulsar's own metadata on them."""

from __future__ import annotations

import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

import pulsar
import pytest

from testkit.java_programs import compiled, java_command
from testkit.stack import broker_version, pulsar_home, pulsar_java, pulsar_line
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import STACK, Stack
from tests.integration.helpers import quiet_logger
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration


async def test_rolled_ledgers_carry_pulsar_metadata(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/roll-{unique}")
    produce(stack.service_url, str(topic), 20)  # 5 entries per ledger in config/standalone.conf

    stats = await admin.internal_stats(topic)
    ids = ml_ledger_ids(stats)
    assert len(ids) >= 3, stats
    for lid in ids:
        md = await bookie.get_metadata(lid)
        assert md is not None, f"ledger {lid} listed by the topic but absent from BookKeeper"
        assert md.custom_metadata["application"] == "pulsar"
        assert md.custom_metadata["component"] == "managed-ledger"
        assert md.custom_metadata["pulsar/managed-ledger"] == topic.managed_ledger_name


async def test_cursor_ledger_carries_cursor_name(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/cursor-{unique}")
    sub = f"sub-{unique}"
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(str(topic), sub, consumer_type=pulsar.ConsumerType.Shared)
        produce(stack.service_url, str(topic), 6)
        for _ in range(6):
            consumer.acknowledge(consumer.receive(timeout_millis=10_000))

        async def cursor_ledger() -> int:
            cur = (await admin.internal_stats(topic))["cursors"][sub]
            return int(cur["cursorLedger"]) if int(cur["cursorLedger"]) >= 0 else 0

        lid = await eventually(cursor_ledger, timeout=30, what="a cursor ledger")
        md = await bookie.get_metadata(lid)
        assert md is not None
        assert md.custom_metadata["application"] == "pulsar"
        assert md.custom_metadata["component"] == "managed-ledger"
        assert md.custom_metadata["pulsar/managed-ledger"] == topic.managed_ledger_name
        assert md.custom_metadata["pulsar/cursor"] == sub
        consumer.close()
    finally:
        client.close()


async def test_delete_through_bookie_http_removes_metadata(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, bookie: BookieClient
) -> None:
    topic = TopicName.parse(f"persistent://{test_namespace}/del-{unique}")
    produce(stack.service_url, str(topic), 12)
    ids = ml_ledger_ids(await admin.internal_stats(topic))
    victim = ids[0]  # closed, not the current ledger
    assert await bookie.get_metadata(victim) is not None
    assert victim in await bookie.list_ledger_ids()

    assert await bookie.delete_ledger(victim) is True
    assert await bookie.get_metadata(victim) is None
    assert victim not in await bookie.list_ledger_ids()
    # Deleting again is harmless: the ledger is simply gone.
    await bookie.delete_ledger(victim)
    assert await bookie.get_metadata(victim) is None
    # Its neighbours are untouched.
    assert await bookie.get_metadata(ids[1]) is not None


def test_deliver_after_arrives_no_earlier_than_asked(stack: Stack, test_namespace: str, unique: str) -> None:
    topic = f"persistent://{test_namespace}/delay-{unique}"
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, "shared", consumer_type=pulsar.ConsumerType.Shared)
        producer = client.create_producer(topic, batching_enabled=False)
        sent_at = time.time()
        producer.send(b"later", deliver_after=timedelta(seconds=3))
        msg = consumer.receive(timeout_millis=30_000)
        received_at = time.time()
        assert msg.data() == b"later"
        assert received_at - sent_at >= 3.0, f"delivered after {received_at - sent_at:.2f}s"
        consumer.acknowledge(msg)
    finally:
        client.close()


def test_up_refuses_a_broker_of_another_version(stack: Stack, tmp_path: Path) -> None:
    """Two lines run side by side on ports of their own; a stack pointed at ports another line's broker
    holds refuses to take it for its own (its health checks alone would pass) and starts nothing."""
    running = broker_version(stack)
    default, pulsar5 = pulsar_line("default").version, pulsar_line("5.0").version
    other = default if running.startswith("5.") else pulsar5
    port = {url: str(urlsplit(url).port) for url in (stack.admin_url, stack.service_url, stack.bookie_http_url)}
    env = {
        **os.environ,
        "PULSAR_VERSION": other,
        "STACK_DIR": str(tmp_path),
        "WEB_PORT": port[stack.admin_url],
        "BROKER_PORT": port[stack.service_url],
        "BOOKIE_HTTP_PORT": port[stack.bookie_http_url],
        "ZK_PORT": stack.zookeeper_hosts.rsplit(":", 1)[1],
        "S3_PORT": str(urlsplit(stack.s3_endpoint).port),
    }
    r = subprocess.run(["bash", str(STACK), "up"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0, r.stderr[-3000:]
    assert f"Pulsar {running} answers on port {port[stack.admin_url]}, not {other}" in r.stderr, r.stderr[-3000:]
    assert not (tmp_path / "run" / "pulsar.pid").exists()


def test_the_java_programs_are_compiled_once_and_run_from_their_classes(stack: Stack) -> None:
    """``tests/integration/java`` is compiled once per Pulsar line (a source launch compiles in every JVM)."""
    home = pulsar_home()
    java = pulsar_java(home)
    classes = compiled(home, java, "CreateLedger")
    made = {p.name: p.stat().st_mtime_ns for p in classes.glob("*.class")}
    assert "CreateLedger.class" in made
    compiled.cache_clear()
    assert compiled(home, java, "CreateLedger") == classes
    assert {p.name: p.stat().st_mtime_ns for p in classes.glob("*.class")} == made
    command = java_command("CreateLedger", stack.zookeeper_hosts, "1", "2")
    assert command[:2] == [java, "-cp"] and command[2].startswith(f"{classes}:") and command[3] == "CreateLedger"
