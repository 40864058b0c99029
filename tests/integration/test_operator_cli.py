"""Operator commands through the real CLI (a subprocess) against the real stack: send, inflight, dlq list."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pulsar
import pytest

from testkit.topics import eventually
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import cli, dead_letter, ml_info, quiet_logger, read_pending, settings_of, worker_config
from worker.broker.admin import PulsarAdmin
from worker.broker.topology import ensure_topology
from worker.formats import message as m
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo
from worker.metrics import Metrics
from worker.operations.phase1 import PendingDeleteSender

pytestmark = pytest.mark.integration


@pytest.mark.parametrize(
    "command",
    [[], ["run"], ["scan"], ["scan-offloaded"], ["send"], ["inflight"], ["dlq"], ["dlq", "list"], ["purge-topic"]],
)
def test_every_command_has_help(command: list[str]) -> None:
    r = cli(None, *command, "--help", timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: ledger-deletion-worker")


T = ["--topic", "persistent://a/b/c"]
ML = ["--component", "MANAGED_LEDGER"]
OFFLOAD = ["--type", "OFFLOAD_LEDGER"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--topic", "not-a-topic", "--ledger-id", "1", *ML], "expected persistent://"),
        (["--topic", "non-persistent://a/b/c", "--ledger-id", "1", *ML], "only persistent topics"),
        ([*T, "--ledger-id", "-4", *ML], "not a valid ledger id"),
        ([*T, "--ledger-id", "x", *ML], "not an integer"),
        ([*T, "--ledger-id", "1", "--component", "LEDGERS"], "choose one of"),
        ([*T, "--ledger-id", "1", "--component", "MANAGED_CURSOR"], "needs cursorName"),
        ([*T, "--ledger-id", "1", "--component", "SCHEMA_STORAGE", "--schema-id", "a/b/x"], "schema id 'a/b/c'"),
        ([*T, "--ledger-id", "1", *ML, "--cursor", "s"], "--cursor only goes with"),
        ([*T, "--ledger-id", "1", *ML, *OFFLOAD], "needs --offload-uuid"),
        ([*T, "--ledger-id", "1", *ML, *OFFLOAD, "--offload-uuid", "nope", "--offload-driver", "s3"], "not a UUID"),
        ([*T, "--ledger-id", "1"], "required: --component"),
    ],
)
def test_send_rejects_bad_input_with_a_clear_message(args: list[str], expected: str) -> None:
    r = cli(None, "send", *args, timeout=60)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert expected in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


async def test_send_queues_one_validated_message(
    stack: Stack, test_namespace: str, unique: str, make_worker: WorkerFactory
) -> None:
    h = worker_config(make_worker, f"cli-send-{unique}")
    topic = f"persistent://{test_namespace}/hand-{unique}"
    r = cli(
        h.config_path,
        *("send", "--topic", topic, "--ledger-id", "123456789", "--component", "managed-cursor"),
        *("--cursor", "my-sub", "--property", "ticket=OPS-1"),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "queued LEDGER 123456789" in r.stdout
    [queued] = read_pending(stack, settings_of(h))
    assert queued == PendingDeleteLedgerInfo(
        topic,
        LedgerComponent.MANAGED_CURSOR,
        LedgerType.LEDGER,
        123456789,
        cursor_name="my-sub",
        properties={"source": "send", "ticket": "OPS-1"},
    )


def inflight(config: Path) -> dict[str, Any]:
    r = cli(config, "inflight", "--json", timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    return dict(json.loads(r.stdout))


def parts(report: dict[str, Any]) -> dict[str, int]:
    return {p["role"]: p["backlog"] for p in report["parts"]}


async def test_inflight_sums_pending_retry_and_dlq(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    h = worker_config(make_worker, f"cli-inflight-{unique}", worker={"send_delay_s": 300})
    s = settings_of(h)
    # Nothing exists yet: absent topics count 0, and the command still succeeds.
    assert inflight(h.config_path)["total"] == 0

    topic = f"persistent://{test_namespace}/inf-{unique}"
    async with PendingDeleteSender(s, admin=admin, metrics=Metrics()) as sender:
        for lid in (1, 2, 3):
            await sender.send_pending_delete(ml_info(topic, 10**12 + lid))
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        payload = m.encode(ml_info(topic, 10**12 + 9))
        dead_letter(client, s.topics.retry, payload, {m.RECONSUMETIMES: "1"})
        for _ in range(2):
            dead_letter(client, s.topics.dlq, payload, {m.REASON: "transient", m.RECONSUMETIMES: "10"})
    finally:
        client.close()

    report = inflight(h.config_path)
    # Delayed messages (deliverable in 300 s) are queued work too.
    assert parts(report) == {"pending": 3, "retry": 1, "dlq": 2}
    assert report["total"] == 6
    table = cli(h.config_path, "inflight", timeout=60)
    assert table.returncode == 0
    assert table.stdout.splitlines()[-1].split()[-1] == "6"


async def test_dlq_list_shows_what_is_parked_and_why_without_consuming(
    stack: Stack, test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    h = worker_config(make_worker, f"cli-dlq-{unique}")
    s = settings_of(h)
    await ensure_topology(admin, s.topics)  # as the daemon does: the replay subscription exists first
    topic = f"persistent://{test_namespace}/dl-{unique}"
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        for lid, reason, err in ((41, "in_use", "referenced by its topic"), (42, "transient", "bookie: 503")):
            props = {m.REASON: reason, m.LAST_ERROR: err, m.RECONSUMETIMES: "10", m.REAL_TOPIC: s.topics.pending}
            dead_letter(client, s.topics.dlq, m.encode(ml_info(topic, lid)), props)
        dead_letter(client, s.topics.dlq, b"\x00garbage", {m.REASON: "invalid", m.LAST_ERROR: "not Avro"})

        def listing(*extra: str) -> list[dict[str, Any]]:
            r = cli(h.config_path, "dlq", "list", "--json", *extra, timeout=60)
            assert r.returncode == 0, r.stderr[-2000:]
            return [json.loads(line) for line in r.stdout.splitlines()]

        got = listing()
        assert [(d["ledger_id"], d["reason"], d["last_error"], d["attempts"], d["state"]) for d in got] == [
            (41, "in_use", "referenced by its topic", 10, "parked"),
            (42, "transient", "bookie: 503", 10, "parked"),
            (None, "invalid", "not Avro", None, "parked"),
        ]
        assert got[0]["topic"] == topic and got[2]["decode_error"]
        assert parts(inflight(h.config_path))["dlq"] == 3, "listing must not acknowledge anything"

        # The nightly replay handled the first one: it is no longer parked.
        replay = client.subscribe(
            s.topics.dlq, s.topics.dlq_replay_subscription, consumer_type=pulsar.ConsumerType.Shared
        )
        first = replay.receive(timeout_millis=10_000)
        assert m.decode(first.data()).ledger_id == 41
        replay.acknowledge(first)
        replay.close()

        async def acked() -> bool:
            return bool(parts(inflight(h.config_path))["dlq"] == 2)

        await eventually(acked, timeout=30, what="the replay subscription's ack")
        assert [d["ledger_id"] for d in listing()] == [42, None]
        assert [(d["ledger_id"], d["state"]) for d in listing("--all")] == [
            (41, "replayed"),
            (42, "parked"),
            (None, "parked"),
        ]
        table = cli(h.config_path, "dlq", "list", timeout=60)
        assert table.returncode == 0
        assert table.stdout.splitlines()[0].split()[:4] == ["LEDGER", "COPY", "TOPIC", "REASON"]
        assert "bookie: 503" in table.stdout and "2 dead letters" in table.stdout
    finally:
        client.close()


async def test_inflight_reaches_zero_once_the_worker_drains(
    test_namespace: str, unique: str, admin: PulsarAdmin, make_worker: WorkerFactory
) -> None:
    pytest.importorskip("worker.daemon.daemon", reason="needs the phase-2 daemon")
    h = worker_config(make_worker, f"cli-drain-{unique}")
    topic = f"persistent://{test_namespace}/drain-{unique}"
    for lid in range(5):
        # Ledgers that do not exist: the worker settles them as already gone.
        r = cli(
            h.config_path, "send", "--topic", topic, "--ledger-id", str(10**12 + lid), "--component", "MANAGED_LEDGER"
        )
        assert r.returncode == 0, r.stderr[-2000:]
    assert inflight(h.config_path)["total"] == 5

    h.start()

    async def drained() -> bool:
        return bool(inflight(h.config_path)["total"] == 0)

    await eventually(drained, timeout=120, interval=1, what="inflight to reach 0")
    assert h.metric("ledger_deletion_deleted_total", result="already_gone") == 5


async def test_dlq_list_shows_a_real_dead_letter_from_the_worker(unique: str, make_worker: WorkerFactory) -> None:
    pytest.importorskip("worker.daemon.daemon", reason="needs the phase-2 daemon")
    h = worker_config(make_worker, f"cli-dlqreal-{unique}")
    h.start()
    h.send(ml_info("persistent://public/default/x", 1), raw=b"not a PendingDeleteLedgerInfo")

    async def listed() -> list[dict[str, Any]]:
        r = cli(h.config_path, "dlq", "list", "--json", timeout=60)
        return [json.loads(line) for line in r.stdout.splitlines()]

    [letter] = await eventually(listed, timeout=60, what="the worker's dead letter")
    assert letter["reason"] == "invalid" and letter["attempts"] == 1 and letter["decode_error"]
    assert letter["state"] == "parked"


def avro_record(topic: str, ledger_id: int, component: str, **kw: Any) -> bytes:
    """A well-formed Avro PendingDeleteLedgerInfo that fails validation (written without it)."""
    import io

    import fastavro

    rec = {
        "topicName": topic,
        "ledgerComponent": component,
        "cursorName": None,
        "schemaId": None,
        "ledgerType": "LEDGER",
        "ledgerId": ledger_id,
        "offloadContext": None,
        "properties": {},
        **kw,
    }
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(m.AVRO_SCHEMA), rec)
    return buf.getvalue()


async def test_dlq_list_shows_ledger_and_type_of_invalid_dead_letters_from_the_worker(
    unique: str, make_worker: WorkerFactory
) -> None:
    pytest.importorskip("worker.daemon.daemon", reason="needs the phase-2 daemon")
    h = worker_config(make_worker, f"cli-dlqinv-{unique}")
    h.start()
    ok_topic = f"persistent://public/default/inv-{unique}"
    # A cursor ledger without its cursor name, and a topic name with five segments (four is a version-1 name):
    # both Avro, both invalid.
    h.send(ml_info(ok_topic, 1), raw=avro_record(ok_topic, 4242, "MANAGED_CURSOR"))
    h.send(ml_info(ok_topic, 1), raw=avro_record("persistent://t/ns/a/b/c", 4343, "MANAGED_LEDGER"))

    async def listed() -> list[dict[str, Any]]:
        r = cli(h.config_path, "dlq", "list", "--json", timeout=60)
        got = [json.loads(line) for line in r.stdout.splitlines()]
        return got if len(got) == 2 else []

    letters = await eventually(listed, timeout=60, what="the worker's two dead letters")
    assert [(d["reason"], d["ledger_id"], d["ledger_type"], d["topic"], d["component"]) for d in letters] == [
        ("invalid", 4242, "LEDGER", ok_topic, "MANAGED_CURSOR"),
        ("invalid", 4343, "LEDGER", "persistent://t/ns/a/b/c", "MANAGED_LEDGER"),
    ]
    assert "needs cursorName" in letters[0]["decode_error"]
    table = cli(h.config_path, "dlq", "list", timeout=60).stdout.splitlines()
    # the BookKeeper copy ("bk"); topics as the tables show them, without persistent://
    assert table[1].split()[:4] == ["4242", "bk", ok_topic.removeprefix("persistent://"), "invalid"]
    assert table[2].split()[:4] == ["4343", "bk", "t/ns/a/b/c", "invalid"]
