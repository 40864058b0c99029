"""A graceful broker shutdown with the extension redelivers no more, and refuses no more, than a stock one.

Where the window is widest: a subscription whose cursor has a ledger of its own acknowledges a burst of
messages right before the SIGTERM. This stack persists a cursor's position at most every 10 s
(``managedLedgerDefaultMarkDeleteRateLimit=0.1``), so the burst's position lives only in the broker's memory
until the cursor closes; closing writes it into the cursor's znode with ``cursorsLedgerId=-1`` (dropping the
cursor's ledger: a drop the extension marks first). If that write fails, the restarted broker recovers the
older position from the cursor ledger and redelivers the burst.

The same instance is restarted in turn: with the extension, stock, with the extension while its queue is
unreachable (unsubscribe and topic deletion must still work, and the shutdown must still persist), and once
with SIGKILL, which shows the window is real (no close write at all: the burst comes back). Each arm counts
what a consumer of the subscription receives after the restart. Runs before test_queue_unavailable.py and,
like it, leaves the instance with the extension on and its queue reachable.
"""

from __future__ import annotations

import json
import re
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pulsar
from kazoo.client import KazooClient

from testkit.stack import process_log
from testkit.topics import produce
from tests.extension.conftest import ExtStack, start_broker, stop_broker
from tests.integration.helpers import quiet_logger
from worker.formats.managed_ledger_metadata import parse_managed_cursor_info
from worker.formats.topic_name import TopicName

SUB = "s"
BURST = 40
UNREACHABLE = (
    "ledgerDeletionServiceUrl=pulsar://127.0.0.1:9 ledgerDeletionWebServiceUrl=http://127.0.0.1:9 "
    "ledgerDeletionMaxWaitSeconds=3"
)


def admin(stack: ExtStack, method: str, path: str) -> Any:
    """One admin call on a fresh connection (the broker restarts between calls)."""
    req = urllib.request.Request(f"{stack.admin_url}{path}", method=method)
    with urllib.request.urlopen(req, timeout=60) as r:
        body = r.read().decode()
    try:
        return json.loads(body) if body else None
    except ValueError:  # the health check answers a bare "ok"
        return body


def wait_for(check: Any, what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            v = check()
        except OSError:
            v = None
        if v:
            return v
        time.sleep(0.3)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stored_cursor_ledger(stack: ExtStack, topic: str) -> int:
    """The ledger id the cursor's znode names (-1: none)."""
    t = TopicName.parse(topic)
    zk = KazooClient(hosts=stack.zookeeper_hosts)
    zk.start(timeout=15)
    try:
        data, _ = zk.get(f"/managed-ledgers/{t.tenant}/{t.namespace}/persistent/{t.local_name}/{SUB}")
    finally:
        zk.stop()
        zk.close()
    return parse_managed_cursor_info(data).cursors_ledger_id


def acknowledge_burst(stack: ExtStack, topic: str) -> None:
    """A subscription whose cursor has its own ledger, then a burst acknowledged: in the broker's memory only."""
    t = TopicName.parse(topic)
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        consumer = client.subscribe(topic, SUB)
        produce(stack.service_url, topic, 5)
        for _ in range(5):
            consumer.acknowledge(consumer.receive(timeout_millis=10000))

        def cursor_ledger() -> int:
            c = admin(stack, "GET", f"/admin/v2/{t.rest_path}/internalStats")["cursors"][SUB]
            return max(int(c.get("cursorLedger", -1)), 0)

        wait_for(cursor_ledger, "the cursor's own ledger", timeout=30)
        produce(stack.service_url, topic, BURST)
        for _ in range(BURST):
            consumer.acknowledge(consumer.receive(timeout_millis=10000))
        consumer.close()  # sends the client's grouped acknowledgements
    finally:
        client.close()

    def acknowledged() -> bool:
        s = admin(stack, "GET", f"/admin/v2/{t.rest_path}/stats")["subscriptions"][SUB]
        return int(s["msgBacklog"]) == 0

    wait_for(acknowledged, "the burst acknowledged on the broker", timeout=30)
    # The precondition of the window: closing the cursor drops this ledger (the extension marks it first).
    assert stored_cursor_ledger(stack, topic) >= 0, "the stored cursor names no ledger: its close would drop nothing"


def redelivered(stack: ExtStack, topic: str) -> int:
    """How many messages the subscription gets again after the restart (all of them were acknowledged)."""
    client = pulsar.Client(stack.service_url, logger=quiet_logger(), operation_timeout_seconds=60)
    try:
        consumer = client.subscribe(topic, SUB)
        n = 0
        while True:
            try:
                consumer.receive(timeout_millis=5000)
            except pulsar.Timeout:
                return n
            n += 1
    finally:
        client.close()


def restart(stack: ExtStack, sig: signal.Signals, *, extension: bool, extra_conf: str = "") -> tuple[float, str]:
    """Stop the broker with ``sig``, start it again; the seconds the stop took and the stopped broker's log."""
    stopped_in = stop_broker(stack.stack_dir, sig)
    log = process_log(stack.stack_dir)
    start_broker(extension=extension, extra_conf=extra_conf)
    return stopped_in, log


def broker_metric(stack: ExtStack, name: str) -> float:
    text = admin(stack, "GET", "/metrics/")
    return sum(float(m.group(1)) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


async def test_graceful_shutdown_redelivers_and_refuses_no_more_than_stock(ext_stack: ExtStack, unique: str) -> None:
    ns = f"public/ext-shutdown-{unique}"
    admin(ext_stack, "PUT", f"/admin/v2/namespaces/{ns}")
    topic = {arm: f"persistent://{ns}/{arm}" for arm in ("extension", "stock", "outage", "sigkill")}
    seconds: dict[str, float] = {}
    refused: list[str] = []
    try:
        # The extension's shutdown; back up stock.
        acknowledge_burst(ext_stack, topic["extension"])
        seconds["extension"], ext_log = restart(ext_stack, signal.SIGTERM, extension=False)
        ext_redelivered = redelivered(ext_stack, topic["extension"])

        # Stock's shutdown; back up with the extension and its queue unreachable.
        acknowledge_burst(ext_stack, topic["stock"])
        seconds["stock"], _ = restart(ext_stack, signal.SIGTERM, extension=True, extra_conf=UNREACHABLE)
        stock_redelivered = redelivered(ext_stack, topic["stock"])

        # A queue outage: unsubscribing and deleting a topic work as on stock (the cursor's ledger and the
        # topic's ledgers are dropped unmarked, left to scan), and the shutdown still persists the cursor.
        gone = f"persistent://{ns}/gone"
        acknowledge_burst(ext_stack, gone)
        unmarked_before = broker_metric(ext_stack, "ledger_deletion_broker_unmarked_total")
        t = TopicName.parse(gone)
        for what, path in (("unsubscribe", f"/subscription/{SUB}"), ("topic deletion", "?force=true")):
            try:
                admin(ext_stack, "DELETE", f"/admin/v2/{t.rest_path}{path}")
            except urllib.error.HTTPError as e:
                refused.append(f"{what}: {e.code} {e.reason}")
        unmarked = broker_metric(ext_stack, "ledger_deletion_broker_unmarked_total") - unmarked_before
        acknowledge_burst(ext_stack, topic["outage"])
        seconds["outage"], outage_log = restart(ext_stack, signal.SIGTERM, extension=True)
        outage_redelivered = redelivered(ext_stack, topic["outage"])

        # The window is real: without any close write the burst comes back.
        acknowledge_burst(ext_stack, topic["sigkill"])
        restart(ext_stack, signal.SIGKILL, extension=True)
        killed_redelivered = redelivered(ext_stack, topic["sigkill"])
    finally:
        # Whatever failed, the next module finds the instance as the session made it.
        if (
            not admin_up(ext_stack)
            or "127.0.0.1:9" in current_conf(ext_stack)
            or "LedgerDeletionStorage" not in (current_conf(ext_stack))
        ):
            restart(ext_stack, signal.SIGTERM, extension=True)

    print(
        f"redelivered after SIGTERM: extension {ext_redelivered}, stock {stock_redelivered}, "
        f"extension with its queue down {outage_redelivered}; after SIGKILL {killed_redelivered} of {BURST}; "
        f"shutdown took {', '.join(f'{k} {v:.1f} s' for k, v in seconds.items())}; refused during the outage: {refused}"
        f" ({unmarked:.0f} ledger copies dropped unmarked)"
    )
    assert refused == []
    # Each arm went through the extension: the closing cursor's ledger was marked (queue up) or left to scan
    # (queue down), and the outage's unsubscribe and deletion dropped theirs unmarked.
    assert f"of {topic['extension']} cursor {SUB}" in ext_log
    assert "left to scan" in outage_log and f"of {topic['outage']} cursor {SUB}" in outage_log
    assert unmarked > 0
    assert killed_redelivered > 0, "a SIGKILL redelivered nothing: the burst was persisted, nothing was tested"
    assert stock_redelivered == 0
    assert ext_redelivered <= stock_redelivered
    assert outage_redelivered <= stock_redelivered


def admin_up(stack: ExtStack) -> bool:
    try:
        admin(stack, "GET", "/admin/v2/brokers/health")
        return True
    except OSError:
        return False


def current_conf(stack: ExtStack) -> str:
    return (Path(stack.stack_dir) / "run" / "standalone.conf").read_text()
