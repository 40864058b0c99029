"""What one message costs the daemon's event loop, piece by piece, against the worker's measured CPU per
settled message (``python -m bench.hot_path``; part of ``make bench``).

Each piece runs alone, in process, N times: decoding the Avro record, the pure decision, one per-outcome
log line (JSON to /dev/null, structlog's processors as the daemon configures them), and one message's
metric updates (prometheus_client). The comparator is the CPU per settled message of the latest
already-gone and ZooKeeper-route worker rows in ``bench/results`` (or BENCH_RESULTS_DIR), printed beside.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from worker.core.decision import Facts, Rules, decide
from worker.core.live_set import TopicGone
from worker.core.stored import Missing
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo, decode, encode
from worker.formats.topic_name import TopicName
from worker.logs import configure, get_logger
from worker.metrics import Metrics, decoded_labels
from worker.settings import WorkerSettings

N = int(os.environ.get("BENCH_HOT_N", "20000"))
RESULTS = Path(os.environ.get("BENCH_RESULTS_DIR") or Path(__file__).resolve().parent / "results")


def _per_call_us(fn: Callable[[], object], n: int) -> float:
    fn()
    t = time.process_time()
    for _ in range(n):
        fn()
    return (time.process_time() - t) / n * 1e6


def _latest_cpu_per_message() -> dict[str, float]:
    """The worker rows' CPU per settled message of the newest result files that have them."""
    out: dict[str, float] = {}
    for f in sorted(RESULTS.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True):
        try:
            rows = json.loads(f.read_text()).get("rows", [])
        except (OSError, ValueError):
            continue
        for r in rows:
            key = str(r.get("key", ""))
            if r.get("kind") == "worker" and r.get("cpu_s") and r.get("completed") and key not in out:
                if key.startswith(("worker-gone-", "worker-direct-zk-")):
                    out[key] = 1e6 * float(r["cpu_s"]) / float(r["completed"])
    return out


def main() -> int:
    topic = "persistent://public/default/ldw-bench-hot"
    info = PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, 123456)
    data = encode(info)
    facts = Facts(TopicGone(TopicName.parse(topic), 1), Missing())
    rules = Rules.of(WorkerSettings())
    now_ms = int(time.time() * 1000)

    devnull = open(os.devnull, "w")  # for the whole run
    real_stderr, sys.stderr = sys.stderr, devnull
    try:
        configure("INFO", "json")
        log = get_logger()
        m = Metrics()

        def log_line() -> None:
            log.info(
                "ledger already gone",
                msg_topic="persistent://pulsar/system/__ledger_deletion-partition-0",
                message_id="(1,2,3,-1)",
                attempt=1,
                route="direct",
                outcome="already_gone",
                topic=topic,
                ledger_id=123456,
                ledger_type="LEDGER",
            )

        def metrics() -> None:
            m.received.inc()
            m.decoded.labels(*decoded_labels(info.properties)).inc()
            m.deleted.labels(ledger_type="LEDGER", route="direct", result="already_gone").inc()
            m.acked.inc()
            m.processing.labels(route="direct", outcome="already_gone").observe(0.01)
            m.end_to_end.observe(1.0)
            m.inflight.inc()
            m.inflight.dec()

        pieces = {
            "decode (Avro)": _per_call_us(lambda: decode(data), N),
            "decide (pure)": _per_call_us(lambda: decide(info, facts, now_ms=now_ms, rules=rules), N),
            "one log line (structlog JSON)": _per_call_us(log_line, N),
            "one message's metric updates": _per_call_us(metrics, N),
        }
    finally:
        sys.stderr = real_stderr
        devnull.close()
    print(f"per-message pieces, CPU microseconds, {N} calls each (in process, process_time):")
    for k, v in pieces.items():
        print(f"  {k:<34} {v:8.1f} us")
    measured = _latest_cpu_per_message()
    if measured:
        print("compared against: the worker's CPU per settled message, newest bench/results rows:")
        for k, v in measured.items():
            share = {p: f"{100 * c / v:.0f}%" for p, c in pieces.items()}
            print(f"  {k:<34} {v:8.1f} us   shares: {share}")
    else:
        print("compared against: no worker row with CPU figures in bench/results yet (run make bench first)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
