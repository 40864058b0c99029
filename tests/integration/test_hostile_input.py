"""Hostile input on the real stack: fuzzed messages through the real decision code, forged messages of
every kind through the real daemon, and the metrics/health server's surface.

"Nothing connected to" is proven with a loopback listener that records every connection: forged offload
contexts name it as their endpoint, and it must see none.
"""

from __future__ import annotations

import asyncio
import io
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fastavro
import pulsar
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from testkit.harness import WorkerHarness, create_ledgers
from testkit.topics import eventually, ml_ledger_ids, produce
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import quiet_logger
from tests.integration.offload_helpers import offload_contexts, offload_topic
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin
from worker.broker.client import PendingDeleteSchema
from worker.core.decision import Outcome
from worker.core.settle_choice import SETTLE
from worker.daemon.decider import open_decider
from worker.formats.message import (
    _PARSED,
    LedgerComponent,
    LedgerType,
    OffloadContext,
    PendingDeleteLedgerInfo,
)
from worker.formats.topic_name import TopicName
from worker.metrics import Metrics
from worker.settings import Settings

pytestmark = pytest.mark.integration

# Every outcome the decision can reach is settled by the pipeline (WOULD_DELETE: dry run only).
SETTLE_OUTCOMES = {*SETTLE, Outcome.WOULD_DELETE}


class ConnectionRecorder:
    """A loopback TCP listener that records (and closes) every connection made to it."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = int(self.sock.getsockname()[1])
        self.connections: list[tuple[str, int]] = []
        self._closed = False
        threading.Thread(target=self._loop, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _loop(self) -> None:
        while not self._closed:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            self.connections.append(addr)
            conn.close()

    def close(self) -> None:
        self._closed = True
        self.sock.close()


@pytest.fixture
def recorder() -> Iterator[ConnectionRecorder]:
    r = ConnectionRecorder()
    yield r
    r.close()


def raw_message(info: PendingDeleteLedgerInfo, **over: Any) -> bytes:
    """A well-formed Avro record with fields the constructor would refuse (what a hostile producer sends)."""
    rec = {**info.to_avro(), **over}
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED, rec)
    return buf.getvalue()


# ---- 1. fuzzing through the real decision code ---------------------------------------------------

_names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_topics = st.one_of(
    _names,
    st.builds(lambda t, n, local: f"persistent://{t}/{n}/{local}", _names, _names, _names),
    st.sampled_from(
        [
            "persistent://public/../x",
            "persistent://public//x",
            "persistent:///default/x",
            "persistent://public/default/",
            "persistent://public/default/..",
            "persistent://public/default/a/../../b",
            "persistent://public/default/%2e%2e",
            "persistent://public/default/x?authoritative=true",
            "non-persistent://public/default/x",
            "http://127.0.0.1:1/x",
        ]
    ),
)


def _fuzz_records(endpoint: str) -> st.SearchStrategy[dict[str, Any]]:
    md = st.dictionaries(
        st.sampled_from(["bucket", "region", "serviceEndpoint", "endpoint", "managedLedgerOffloadDriver", "x"]),
        st.one_of(_names, st.just(endpoint), st.just("pulsar-offload"), st.just("us-east-1")),
        max_size=4,
    )
    ctx = st.fixed_dictionaries(
        {
            "uidMsb": st.integers(-(2**63), 2**63 - 1),
            "uidLsb": st.integers(-(2**63), 2**63 - 1),
            "driverName": st.sampled_from(["aws-s3", "S3", "filesystem", "google-cloud-storage", "", "x"]),
            "driverMetadata": md,
        }
    )
    # Ids that exist on the shared stack as well as ids nothing has: dry run, nothing is deleted.
    ids = st.one_of(st.integers(-5, 3000), st.integers(-(2**63), 2**63 - 1))
    components = ["MANAGED_LEDGER", "MANAGED_CURSOR", "SCHEMA_STORAGE", "COMPACTED_LEDGER"]
    wild = st.fixed_dictionaries(
        {
            "topicName": _topics,
            "ledgerComponent": st.sampled_from(components),
            "cursorName": st.one_of(st.none(), _names),
            "schemaId": st.one_of(st.none(), _names),
            "ledgerType": st.sampled_from(["LEDGER", "OFFLOAD_LEDGER"]),
            "ledgerId": ids,
            "offloadContext": st.one_of(st.none(), ctx),
            "properties": st.dictionaries(_names, _names, max_size=3),
        }
    )
    # Records that pass decoding, so the routes, storage reads and identity checks get fuzzed too.
    seg = st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True)
    topic = st.one_of(
        st.builds(lambda t, n, local: f"persistent://{t}/{n}/{local}", seg, seg, seg),
        st.builds(lambda local: f"persistent://public/default/{local}", seg),
        st.builds(lambda local, i: f"persistent://public/default/{local}-partition-{i}", seg, st.integers(0, 3)),
    )

    def plausible(t: str, comp: str, name: str, lt: str, lid: int, c: dict[str, Any]) -> dict[str, Any]:
        base = t.split("-partition-")[0]
        return {
            "topicName": t,
            "ledgerComponent": comp,
            "cursorName": name if comp == "MANAGED_CURSOR" else None,
            "schemaId": base.removeprefix("persistent://") if comp == "SCHEMA_STORAGE" else None,
            "ledgerType": lt,
            "ledgerId": lid,
            "offloadContext": c if lt == "OFFLOAD_LEDGER" else None,
            "properties": {},
        }

    good = st.builds(
        plausible, topic, st.sampled_from(components), seg, st.sampled_from(["LEDGER", "OFFLOAD_LEDGER"]), ids, ctx
    )
    return st.one_of(wild, good, good)


def _encode_record(rec: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, _PARSED, rec)
    return buf.getvalue()


def test_fuzzed_messages_never_escape_the_decision_and_connect_nowhere(
    stack: Stack, tmp_path: Path, recorder: ConnectionRecorder
) -> None:
    """Arbitrary bytes and arbitrary field values through the daemon's own Decider (dry run, real
    backends): it never raises, every outcome has a settle action, and no request goes to an address a
    message named."""
    cfg = Settings.model_validate(
        {
            "pulsar": {"service_url": stack.service_url, "admin_url": stack.admin_url},
            "bookkeeper": {"http_url": stack.bookie_http_url},
            "zookeeper": {"metadata_store_url": f"zk:{stack.zookeeper_hosts}"},
            "offload": {
                "s3_targets": [
                    {
                        "bucket": stack.s3_bucket,
                        "endpoint": stack.s3_endpoint,
                        "region": "us-east-1",
                        "access_key_id": "testing",
                        "secret_access_key": "testing",
                    }
                ]
            },
        }
    )
    loop = asyncio.new_event_loop()
    metrics = Metrics()
    ctx = open_decider(cfg, metrics, dry_run=True)
    decider = loop.run_until_complete(ctx.__aenter__())
    seen: dict[str, int] = {}
    try:

        def check(data: bytes) -> None:
            _, res = loop.run_until_complete(decider.decide(data))
            assert res.outcome in SETTLE_OUTCOMES, res
            seen[res.outcome.value] = seen.get(res.outcome.value, 0) + 1

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        @given(st.binary(max_size=300))
        def arbitrary_bytes(data: bytes) -> None:
            check(data)

        @settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck))
        @given(_fuzz_records(recorder.url))
        def arbitrary_fields(rec: dict[str, Any]) -> None:
            try:
                data = _encode_record(rec)
            except (ValueError, TypeError, OverflowError):
                return  # not even Avro: covered by arbitrary_bytes
            check(data)

        arbitrary_bytes()
        arbitrary_fields()
    finally:
        loop.run_until_complete(ctx.__aexit__(None, None, None))
        loop.close()
    print(f"\nfuzzed outcomes: {seen}")
    assert recorder.connections == [], f"the worker connected to an address a message named: {recorder.connections}"
    assert seen.get("invalid", 0) > 0 and len(seen) >= 3, seen


# ---- 2. forged messages of every kind through the daemon ------------------------------------------


async def _cursor_ledgers(admin: PulsarAdmin, topic: str) -> dict[str, int]:
    stats = await admin.internal_stats(TopicName.parse(topic))
    return {
        n: int(c["cursorLedger"]) for n, c in (stats.get("cursors") or {}).items() if c.get("cursorLedger", -1) >= 0
    }


async def test_forged_messages_of_every_kind_are_rejected_deleted_nothing_connected_nowhere(
    stack: Stack,
    test_namespace: str,
    unique: str,
    admin: PulsarAdmin,
    bookie: BookieClient,
    recorder: ConnectionRecorder,
    make_worker: WorkerFactory,
) -> None:
    ns = test_namespace
    # Topic A: two subscriptions, each with its cursor ledger. A cursor creates its ledger on its first
    # persisted position and (rollover time 0 on the local stack) rolls to a new one on every later persist.
    # So: one cumulative ack each, more than a second after subscribing. The broker persists at most one
    # mark-delete a second per cursor (managedLedgerDefaultMarkDeleteRateLimit=1); a rate-limited one
    # is persisted by the periodic flush up to a minute later, rolling the ledger under the worker's feet.
    topic_a = f"persistent://{ns}/fa-{unique}"
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    consumers = [client.subscribe(topic_a, s, consumer_type=pulsar.ConsumerType.Exclusive) for s in ("s1", "s2")]
    await asyncio.sleep(1.5)
    produce(stack.service_url, topic_a, 12)
    for c in consumers:
        last = None
        for _ in range(12):
            last = c.receive(timeout_millis=10_000)
        c.acknowledge_cumulative(last)
    await asyncio.sleep(1)
    # Topic S: an Avro schema, hence a schema ledger.
    topic_s = f"persistent://{ns}/fs-{unique}"
    p = client.create_producer(topic_s, schema=PendingDeleteSchema(), batching_enabled=False)
    p.send(PendingDeleteLedgerInfo(topic_s, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 1))
    p.close()
    client.close()

    cursors = await eventually(
        lambda: _full(_cursor_ledgers(admin, topic_a)), timeout=60, what="both cursor ledgers of topic A"
    )
    a_ledger = ml_ledger_ids(await admin.internal_stats(TopicName.parse(topic_a)))[0]
    schema_ledgers = [
        int(s["ledgerId"]) for s in (await admin.internal_stats(TopicName.parse(topic_s)))["schemaLedgers"]
    ]
    assert schema_ledgers, "topic S has no schema ledger"
    [foreign] = create_ledgers(stack, 1, {"application": "hdfs", "component": "managed-ledger"})
    # Topic X offloaded to S3; topic Y live: Y's message carries X's ledger and X's offload uuid.
    topic_x, topic_y = f"persistent://{ns}/fx-{unique}", f"persistent://{ns}/fy-{unique}"
    produce(stack.service_url, topic_x, 12)
    produce(stack.service_url, topic_y, 3)
    x_offloaded = await offload_topic(admin, TopicName.parse(topic_x))
    x_ctx = (await offload_contexts(stack, TopicName.parse(topic_x)))[x_offloaded[0]]
    x_lid = x_offloaded[0]

    def ml(topic: str, lid: int, **kw: Any) -> PendingDeleteLedgerInfo:
        return PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, lid, **kw)

    def off(topic: str, lid: int, ctx: OffloadContext) -> PendingDeleteLedgerInfo:
        return PendingDeleteLedgerInfo(
            topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, lid, offload_context=ctx
        )

    def with_md(**md: str) -> OffloadContext:
        return OffloadContext(x_ctx.uid_msb, x_ctx.uid_lsb, x_ctx.driver_name, {**x_ctx.driver_metadata, **md})

    gone_topic = f"persistent://{ns}/nobody-{unique}"
    forged: list[tuple[str, PendingDeleteLedgerInfo | bytes]] = [
        ("other topic's ledger", ml(topic_y, a_ledger)),
        ("other topic's ledger, gone topic", ml(gone_topic, a_ledger)),
        (
            "other cursor's ledger",
            PendingDeleteLedgerInfo(
                topic_a, LedgerComponent.MANAGED_CURSOR, LedgerType.LEDGER, cursors["s1"], cursor_name="s2"
            ),
        ),
        ("cursor ledger claimed as data", ml(topic_a, cursors["s2"])),
        ("schema ledger claimed as data", ml(topic_s, schema_ledgers[0])),
        ("schema ledger claimed by another topic", ml(topic_a, schema_ledgers[0])),
        ("non-Pulsar ledger", ml(gone_topic, foreign)),
        ("another topic's offload uuid", off(topic_y, x_lid, x_ctx)),
        ("another topic's offload uuid, gone topic", off(gone_topic, x_lid, x_ctx)),
        ("endpoint not configured", off(gone_topic, x_lid, with_md(serviceEndpoint=recorder.url))),
        ("endpoint not configured (key 'endpoint')", off(gone_topic, x_lid, with_md(endpoint=recorder.url))),
        ("bucket not configured", off(gone_topic, x_lid, with_md(bucket="someone-elses"))),
        ("region not configured", off(gone_topic, x_lid, with_md(region="eu-west-9"))),
        (
            "filesystem offload not configured",
            off(gone_topic, x_lid, OffloadContext(x_ctx.uid_msb, x_ctx.uid_lsb, "filesystem", {})),
        ),
        (
            "unsupported driver",
            off(gone_topic, x_lid, OffloadContext(x_ctx.uid_msb, x_ctx.uid_lsb, "google-cloud-storage", {})),
        ),
        ("'..' segment", raw_message(ml(topic_a, a_ledger), topicName=f"persistent://{ns}/../fa-{unique}")),
        ("'..' as the local name", raw_message(ml(topic_a, a_ledger), topicName=f"persistent://{ns}/..")),
        ("empty namespace segment", raw_message(ml(topic_a, a_ledger), topicName=f"persistent://public//fa-{unique}")),
        ("empty local name", raw_message(ml(topic_a, a_ledger), topicName=f"persistent://{ns}/")),
        ("empty tenant", raw_message(ml(topic_a, a_ledger), topicName=f"persistent:///x/fa-{unique}")),
        ("URL in the topic name", raw_message(ml(topic_a, a_ledger), topicName=f"{recorder.url}/{ns}/x")),
    ]
    kept_ledgers = [a_ledger, *cursors.values(), *schema_ledgers, foreign, x_lid]
    w = make_worker(
        f"hostile-{unique}",
        offload={
            "s3_targets": [
                {
                    "bucket": stack.s3_bucket,
                    "endpoint": stack.s3_endpoint,
                    "region": "us-east-1",
                    "access_key_id": "testing",
                    "secret_access_key": "testing",
                }
            ]
        },
    )
    for _, m in forged:
        if isinstance(m, bytes):
            w.send(None, raw=m)  # type: ignore[arg-type]
        else:
            w.send(m)

    def settled() -> float:
        return w.metric("ledger_deletion_dlq_total") + w.metric("ledger_deletion_deleted_total")

    async def all_settled() -> bool:
        return settled() >= len(forged)

    await eventually(all_settled, timeout=90, what=f"{len(forged)} forged messages settled")
    # The local stack's brokers roll a cursor ledger on every mark-delete persisted after the first
    # (managedLedgerCursorRolloverTimeInSeconds=0), and drop the old one themselves: a claim naming a cursor
    # ledger the broker has since replaced finds nothing to delete. Such a claim is settled already gone;
    # every other one must be dead-lettered, and the worker deletes nothing.
    rolled = set(cursors.values()) - set((await _cursor_ledgers(admin, topic_a)).values())
    rolled = {lid for lid in rolled if await bookie.get_metadata(lid) is None}
    claims_of_rolled = sum(
        1
        for _, m in forged
        if isinstance(m, PendingDeleteLedgerInfo) and m.ledger_id in rolled and m.topic_name == topic_a
    )
    dead = w.read_dlq()
    reasons = sorted((m.properties()["reason"], m.properties().get("last_error", "")) for m in dead)
    print("\nforged messages -> DLQ:", *(f"  {r}: {e}" for r, e in reasons), sep="\n")
    already_gone = w.metric("ledger_deletion_deleted_total", result="already_gone")
    assert already_gone <= claims_of_rolled, (already_gone, rolled)  # (a rollover after the decision: dead-lettered)
    assert len(dead) == len(forged) - already_gone, (len(dead), rolled)
    assert {r for r, _ in reasons} <= {"rejected", "invalid"}
    assert w.metric("ledger_deletion_deleted_total", result="deleted") == 0
    assert w.metric("ledger_deletion_in_use_total") == 0, "a forged message was taken for a live one"
    assert w.metric("ledger_deletion_retried_total") == 0
    for lid in kept_ledgers:
        if lid not in rolled:
            assert await bookie.get_metadata(lid) is not None, f"ledger {lid} was deleted by a forged message"
    import boto3

    s3 = boto3.client(
        "s3",
        endpoint_url=stack.s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    for key in (f"{x_ctx.uuid}-ledger-{x_lid}", f"{x_ctx.uuid}-ledger-{x_lid}-index"):
        s3.head_object(Bucket=stack.s3_bucket, Key=key)  # raises if a forged message deleted it
    assert recorder.connections == [], f"connected to an address a message named: {recorder.connections}"


async def _full(coro: Any) -> dict[str, int] | None:
    d = await coro
    return d if len(d) == 2 else None


# ---- 3. the metrics/health server ----------------------------------------------------------------

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE")
PATHS = ("/metrics", "/healthz", "/readyz", "/", "/admin", "/metrics/../readyz", "/debug/pprof", "/quitquitquit")


def _status(url: str, method: str) -> int:
    req = urllib.request.Request(url, method=method, data=b"x" if method in ("POST", "PUT", "PATCH") else None)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def test_http_server_binds_the_configured_address_and_serves_nothing_that_writes(
    stack: Stack, unique: str, tmp_path: Path, harnesses: list[WorkerHarness]
) -> None:
    # 127.0.0.2 is loopback too (the whole 127/8 is), but not 127.0.0.1: the bind address is honoured.
    w = WorkerHarness(stack, tmp_path, f"http-{unique}")
    w.config["http"] = {"host": "127.0.0.2", "port": w.port}
    import yaml

    w.config_path.write_text(yaml.safe_dump(w.config))
    harnesses.append(w)
    w.proc = None
    # WorkerHarness polls 127.0.0.1 for readiness: start it by hand and poll the configured address.
    import subprocess
    import sys
    import time

    from tests.conftest import REPO

    log = open(w.log_path, "ab")
    w.proc = subprocess.Popen(
        [sys.executable, "-m", "worker.cli", "run", "--config", str(w.config_path)], cwd=REPO, stdout=log, stderr=log
    )
    base = f"http://127.0.0.2:{w.port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert w.proc.poll() is None, w.log_tail()
        try:
            if _status(f"{base}/readyz", "GET") == 200:
                break
        except OSError:
            pass
        time.sleep(0.3)
    else:
        raise AssertionError(f"worker not ready on {base}: {w.log_tail()}")

    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", w.port), timeout=2).close()

    before = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()
    table: dict[tuple[str, str], int] = {}
    for path in PATHS:
        for method in METHODS:
            try:
                table[(method, path)] = _status(f"{base}{path}", method)
            except OSError as e:  # a server that drops the connection serves nothing either
                table[(method, path)] = -1
                assert "refused" not in str(e).lower(), e
    allowed = {(m, p) for m in ("GET", "HEAD") for p in ("/metrics", "/healthz", "/readyz")}
    for key, status in table.items():
        if key in allowed:
            assert status == 200, (key, status)
        else:
            assert status in (404, 405, 400, 501, -1), f"{key} answered {status}"
    # Nothing changed state: the worker is still ready and its counters did not move.
    assert _status(f"{base}/readyz", "GET") == 200
    after = urllib.request.urlopen(f"{base}/metrics", timeout=5).read().decode()

    def counters(text: str) -> list[str]:
        return [ln for ln in text.splitlines() if ln.startswith("ledger_deletion_") and "_total" in ln]

    assert counters(before) == counters(after)
    assert w.proc.poll() is None
