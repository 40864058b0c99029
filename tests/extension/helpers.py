"""Helpers shared by the broker-extension tests, by concept: the broker's admin API and its metadata in ZooKeeper;
the extension's queue and the broker's marks on it; the worker draining it and the scan after it."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import pulsar
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from testkit.harness import WorkerHarness
from testkit.stack import scan_dry_run
from testkit.topics import eventually
from tests.extension.conftest import PENDING, ExtStack, worker_config_file
from tests.integration.helpers import quiet_logger
from worker.formats.managed_ledger_metadata import parse_managed_cursor_info, parse_managed_ledger_info
from worker.formats.message import LedgerType, PendingDeleteLedgerInfo, decode
from worker.formats.topic_name import TopicName

# The outcomes that settle a ledger for good.
SETTLED = {"deleted", "already_gone"}
# What queued_for answers.
Queued = dict[tuple[str, int], tuple[PendingDeleteLedgerInfo, int]]


# ---- the broker: its admin API, its metadata ------------------------------------------------------------


def rest(stack: ExtStack, method: str, path: str, body: object | None = None) -> None:
    """An admin REST call on the extension's stack (JSON ``body``), its answer discarded."""
    req = urllib.request.Request(
        f"{stack.admin_url}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    urllib.request.urlopen(req, timeout=60).close()


def internal_stats(stack: ExtStack, t: TopicName) -> dict[str, object]:
    """The broker's ``internalStats`` of ``t``, as JSON."""
    url = f"{stack.admin_url}/admin/v2/{t.rest_path}/internalStats"
    with urllib.request.urlopen(url, timeout=10) as r:
        return dict(json.loads(r.read()))


def compacted_ledgers_named(stats: dict[str, object]) -> set[int]:
    """The compacted ledgers a topic names: the loaded one and the ``__compaction`` cursor's property."""
    named = set()
    loaded = int((stats.get("compactedLedger") or {}).get("ledgerId", -1))  # type: ignore[attr-defined]
    if loaded >= 0:
        named.add(loaded)
    cursor = (stats.get("cursors") or {}).get("__compaction") or {}  # type: ignore[attr-defined]
    prop = (cursor.get("properties") or {}).get("CompactedTopicLedger")
    if prop is not None and int(prop) >= 0:
        named.add(int(prop))
    return named


def broker_metric(stack: ExtStack, name: str) -> float:
    """The sum of every series of metric ``name`` on the broker's ``/metrics``."""
    with urllib.request.urlopen(f"{stack.admin_url}/metrics/", timeout=30) as r:
        text = r.read().decode()
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def ml_path(topic: str) -> str:
    """The znode of ``topic``'s managed ledger (its ledger list; its cursors are its children)."""
    t = TopicName.parse(topic)
    return f"/managed-ledgers/{t.tenant}/{t.namespace}/persistent/{t.local_name}"


@dataclass
class MetadataWatch:
    """Polls a topic's ledger list and cursors in ZooKeeper; records when each ledger left them."""

    zk_hosts: str
    topic: str
    gone_at_ms: dict[int, float] = field(default_factory=dict)  # ledger id -> mtime of the version without it
    seen: set[int] = field(default_factory=set)
    cursor_seen: dict[int, str] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        self.zk = KazooClient(hosts=self.zk_hosts)
        self.zk.start(timeout=15)
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _poll(self) -> None:
        path = ml_path(self.topic)
        try:
            data, stat = self.zk.get(path)
        except NoNodeError:
            # The whole topic's metadata went: every ledger seen is gone (no mtime: the poll time).
            now = time.time() * 1000
            for lid in self.seen - set(self.gone_at_ms):
                self.gone_at_ms[lid] = now
            return
        listed = set(parse_managed_ledger_info(data).ledger_ids)
        cursors: dict[int, float] = {}
        for c in self.zk.get_children(path):
            try:
                cdata, cstat = self.zk.get(f"{path}/{c}")
            except NoNodeError:
                continue
            lid = parse_managed_cursor_info(cdata).cursors_ledger_id
            if lid >= 0:
                cursors[lid] = cstat.mtime
                self.cursor_seen[lid] = c
        live = listed | set(cursors)
        for lid in self.seen - live - set(self.gone_at_ms):
            self.gone_at_ms[lid] = float(stat.mtime) if lid not in self.cursor_seen else time.time() * 1000
        self.seen |= live

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._poll()
            except Exception:  # a znode half-written or replaced between reads: poll again
                pass
            self._stop.wait(0.05)

    def __enter__(self) -> MetadataWatch:
        self._poll()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.thread.join(5)
        self.zk.stop()
        self.zk.close()


# ---- the extension's queue ------------------------------------------------------------------------------


def read_queue(service_url: str) -> list[tuple[PendingDeleteLedgerInfo, int]]:
    """Every message on the extension's queue (all partitions), with its publish time (ms)."""
    client = pulsar.Client(service_url, logger=quiet_logger())
    out: list[tuple[PendingDeleteLedgerInfo, int]] = []
    try:
        for p in range(4):
            reader = client.create_reader(f"{PENDING}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                m = reader.read_next(timeout_millis=5000)
                out.append((decode(m.data()), m.publish_timestamp()))
            reader.close()
    finally:
        client.close()
    return out


def queued_for(service_url: str, topic: str) -> dict[tuple[str, int], tuple[PendingDeleteLedgerInfo, int]]:
    """What the queue holds for ``topic``: (ledger type, ledger id) -> (message, publish time in ms)."""
    return {(i.ledger_type.value, i.ledger_id): (i, ts) for i, ts in read_queue(service_url) if i.topic_name == topic}


def assert_signed_by_the_broker(stack: ExtStack, topic: str) -> int:
    """Every message the broker queued for ``topic`` carries its mark: the message property ``ledger-deletion-mark``
    = ``hmac-sha256:`` + HMAC-SHA256 of the payload under the stack's key (stack.sh's BROKER_MARK_KEY_FILE)."""
    key = Path(stack.mark_key_file).read_bytes().rstrip()
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    n = 0
    try:
        for p in range(4):
            reader = client.create_reader(f"{PENDING}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                m = reader.read_next(timeout_millis=5000)
                if decode(m.data()).topic_name != topic:
                    continue
                expected = "hmac-sha256:" + hmac.new(key, m.data(), hashlib.sha256).hexdigest()
                assert m.properties().get("ledger-deletion-mark") == expected, m.properties()
                n += 1
            reader.close()
    finally:
        client.close()
    assert n > 0, f"nothing queued for {topic}"
    return n


def assert_marked_before_forgotten(watch: MetadataWatch, queued: Queued) -> None:
    """Every ledger ``watch`` saw leave the metadata was queued, no later than it left."""
    assert watch.gone_at_ms, "the broker dropped no ledger: nothing was tested"
    for lid, gone in sorted(watch.gone_at_ms.items()):
        entry = queued.get((LedgerType.LEDGER.value, lid))
        assert entry is not None, f"ledger {lid} left the metadata but is not on the queue: {sorted(queued)}"
        _, published = entry
        assert published <= gone, f"ledger {lid}: queued at {published}, metadata forgot it at {gone}"


# ---- the worker draining it, the scan after it ----------------------------------------------------------


def settled(w: WorkerHarness, topic: str) -> dict[tuple[str, int], str]:
    """What the worker's log says it settled for ``topic``: (ledger type, ledger id) -> outcome."""
    out: dict[tuple[str, int], str] = {}
    for e in w.log_events():
        if e.get("topic") == topic and e.get("outcome") and e.get("ledger_id") is not None:
            out[(str(e.get("ledger_type")), int(e["ledger_id"]))] = str(e["outcome"])
    return out


async def wait_settled(w: WorkerHarness, topic: str, keys: set[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """Wait until the worker settled each of ``keys`` of ``topic`` (deleted or already gone); all it settled."""

    async def check() -> dict[tuple[str, int], str]:
        s = settled(w, topic)
        return s if all(s.get(k) in SETTLED for k in keys) else {}

    return await eventually(check, timeout=90, interval=1, what=f"worker settling {sorted(keys)}")


def scan_orphans(stack: ExtStack, tmp_path: Path, namespace: str) -> list[dict[str, object]]:
    """The orphans a dry-run scan of ``namespace`` on the extension's stack reports."""
    return list(scan_dry_run(worker_config_file(stack, tmp_path), namespace, timeout=300)["orphans"])
