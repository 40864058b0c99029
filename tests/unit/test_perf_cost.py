"""bench.perf_cost's reading of pulsar-perf's (4.0.8) aggregated lines and of the extension broker's mark lines, on
lines captured from real runs."""

from __future__ import annotations

import pytest

from bench.perf_cost import Knobs, mark_waits_ms, parse_aggregated, throughput, trim_split_ms

PRODUCE = (
    "2026-11-27T23:49:31,082+0000 [perf-client-shutdown] INFO  org.apache.pulsar.testclient.PerformanceProducer - "
    "Aggregated throughput stats --- 4997 records sent --- 498.601 msg/s --- 3.895 Mbit/s \n"
    "2026-11-27T23:49:31,122+0000 [perf-client-shutdown] INFO  org.apache.pulsar.testclient.PerformanceProducer - "
    "Aggregated latency stats --- Latency: mean:   3.366 ms - med:   2.237 - 95pct:   7.012 - 99pct:  32.696 - "
    "99.9pct:  61.773 - 99.99pct:  64.891 - 99.999pct:  64.891 - Max:  64.891\n"
)
CONSUME = (
    "2026-11-27T23:50:05,133+0000 [main] INFO  org.apache.pulsar.testclient.PerformanceConsumer - Throughput "
    "received:    5001 msg --- 500.092  msg/s --- 3.907 Mbit/s  --- Latency: mean: 39.462 ms - med: 12 - 95pct: 231 "
    "- 99pct: 330 - 99.9pct: 373 - 99.99pct: 377 - Max: 377\n"
    "2026-11-27T23:50:07,853+0000 [perf-client-shutdown] INFO  org.apache.pulsar.testclient.PerformanceConsumer - "
    "Aggregated throughput stats --- 5001 records received --- 392.083 msg/s --- 3.063 Mbit/s --- AckRate: "
    "392.0831680625555  msg/s --- ack failed 0 msg\n"
    "2026-11-27T23:50:07,889+0000 [perf-client-shutdown] INFO  org.apache.pulsar.testclient.PerformanceConsumer - "
    "Aggregated latency stats --- Latency: mean: 39.462 ms - med: 12 - 95pct: 231 - 99pct: 330 - 99.9pct: 373 - "
    "99.99pct: 377 - 99.999pct: 377 - Max: 377\n"
)


def test_producer_aggregated_stats() -> None:
    got = parse_aggregated(PRODUCE)
    assert got["count"] == 4997
    assert got["rate"] == pytest.approx(498.601)
    assert (got["p50"], got["p99"], got["p99.9"], got["max"]) == pytest.approx((2.237, 32.696, 61.773, 64.891))


def test_consumer_aggregated_stats_not_its_interval_line() -> None:
    got = parse_aggregated(CONSUME)
    assert got["count"] == 5001
    assert got["rate"] == pytest.approx(392.083)
    assert (got["p50"], got["p99"], got["p99.9"]) == (12, 330, 373)


def test_no_aggregated_lines_no_keys() -> None:
    assert parse_aggregated("Exception in thread main java.lang.OutOfMemoryError: Java heap space") == {}


_NS = "public/ldw-perf-35219461-standalone-extension-r0"
_MARK = (
    "{ts} [BookKeeperClientWorker-OrderedExecutor-0-0] INFO  org.ledgerdeletion.broker.MarkingMetaStore - "
    "[ledger-deletion] [{ns}/persistent/{t}] metadata write drops 2 ledger copies: marking first "
    "[LEDGER:{a} of persistent://{ns}/{t}{cursor}, LEDGER:{b} of persistent://{ns}/{t}{cursor}]"
)
_DURABLE = (
    "{ts} [pulsar-client-io-77-1] INFO  org.ledgerdeletion.broker.PendingDeletePublisher - [ledger-deletion] "
    "pending deletion durable: LEDGER:{a} of persistent://{ns}/{t} as 6:0:1"
)


def _mark(ts: str, t: str, a: int, b: int, ns: str = _NS, cursor: str = "") -> str:
    return _MARK.format(ts=ts, ns=ns, t=t, a=a, b=b, cursor=cursor)


def _durable(ts: str, t: str, a: int) -> str:
    return _DURABLE.format(ts=ts, ns=_NS, t=t, a=a)


def test_mark_wait_is_until_the_last_of_its_ledgers_is_durable() -> None:
    log = "\n".join(
        [
            _mark("2026-11-27T23:49:50,769+0000", "t2", 25, 28),
            _mark("2026-11-27T23:49:50,807+0000", "t1", 24, 27),
            _durable("2026-11-27T23:49:50,809+0000", "t2", 25),
            _durable("2026-11-27T23:49:50,812+0000", "t1", 24),
            _durable("2026-11-27T23:49:50,814+0000", "t2", 28),
            "2026-11-27T23:49:50,815+0000 [main] INFO  org.apache.pulsar.broker - unrelated",
            _durable("2026-11-27T23:49:50,850+0000", "t1", 27),
        ]
    )
    assert mark_waits_ms(log, _NS + "/") == pytest.approx([45.0, 43.0], abs=0.01)


def test_writes_left_out_cursor_other_namespace_or_not_durable() -> None:
    log = "\n".join(
        [
            _mark("2026-11-27T23:49:50,000+0000", "t0", 1, 2, cursor=" cursor sub"),
            _mark("2026-11-27T23:49:50,000+0000", "t0", 3, 4, ns="public/other"),
            _mark("2026-11-27T23:49:50,000+0000", "t3", 5, 6),
            _durable("2026-11-27T23:49:50,010+0000", "t3", 5),
        ]
    )
    assert mark_waits_ms(log, _NS + "/") == []


_NS_SPLIT = "public/ldw-perf-c83e0c58-standalone-extension-r0"
_ML = "org.apache.bookkeeper.mledger.impl.ManagedLedgerImpl"
_EXT = "INFO  org.ledgerdeletion.broker"
_REQ = "INFO  org.eclipse.jetty.server.RequestLog - 127.0.0.1 - - "
_SPLIT_LOG = "\n".join(
    [
        f"2026-11-28T00:13:20,043+0000 [BookKeeperClientWorker-OrderedExecutor-0-0] {_EXT}.MarkingMetaStore - "
        f"[ledger-deletion] [{_NS_SPLIT}/persistent/t3] metadata write drops 2 ledger copies: marking first "
        f"[LEDGER:27 of persistent://{_NS_SPLIT}/t3, LEDGER:47 of persistent://{_NS_SPLIT}/t3]",
        f"2026-11-28T00:13:20,094+0000 [pulsar-client-io-77-1] {_EXT}.PendingDeletePublisher - [ledger-deletion] "
        f"pending deletion durable: LEDGER:27 of persistent://{_NS_SPLIT}/t3 as 9:6:1",
        f"2026-11-28T00:13:20,099+0000 [pulsar-client-io-77-1] {_EXT}.PendingDeletePublisher - [ledger-deletion] "
        f"pending deletion durable: LEDGER:47 of persistent://{_NS_SPLIT}/t3 as 7:6:2",
        f"2026-11-28T00:13:20,121+0000 [bookkeeper-ml-scheduler-OrderedScheduler-2-0] INFO  {_ML} - "
        f"[{_NS_SPLIT}/persistent/t3] End TrimConsumedLedgers. ledgers=1 totalSize=0",
        f"2026-11-28T00:13:20,121+0000 [bookkeeper-ml-scheduler-OrderedScheduler-2-0] INFO  {_ML} - "
        f"[{_NS_SPLIT}/persistent/t3] Removing ledger 27 - size: 5295",
        f"2026-11-28T00:13:20,127+0000 [bookkeeper-ml-scheduler-OrderedScheduler-2-0] {_REQ}[28/Nov/2026:00:13:19 "
        f'+0000] "POST /admin/v2/persistent/{_NS_SPLIT}/t3/trim?authoritative=true HTTP/1.1" 200 0 "-" '
        '"Python/3.11 aiohttp/3.14.5" 185',
        f"2026-11-28T00:11:25,460+0000 [bookkeeper-ml-scheduler-OrderedScheduler-3-0] {_REQ}[28/Nov/2026:00:11:25 "
        '+0000] "POST /admin/v2/persistent/public/other/t4/trim HTTP/1.1" 200 0 "-" "Python/3.11 aiohttp/3.14.5" 68',
    ]
)


def test_trim_split_from_the_brokers_log() -> None:
    split = trim_split_ms(_SPLIT_LOG, _NS_SPLIT)
    assert split["call"] == [185.0]
    # The request started 185 ms before its response (20.127 s): at 19.942 s.
    assert split["to_marking"] == pytest.approx([101.0], abs=0.01)
    assert split["mark_wait"] == pytest.approx([56.0], abs=0.01)
    assert split["update"] == pytest.approx([22.0], abs=0.01)
    assert split["to_update_done"] == pytest.approx([179.0], abs=0.01)
    assert split["after_update"] == pytest.approx([6.0], abs=0.01)


def test_trim_split_stock_has_no_marks() -> None:
    stock = "\n".join(x for x in _SPLIT_LOG.splitlines() if "ledger-deletion" not in x)
    split = trim_split_ms(stock, _NS_SPLIT)
    assert set(split) == {"call", "to_update_done", "after_update"}


def test_throughput_over_the_duration_unless_the_producer_overran_it() -> None:
    # A 30 s run divided by pulsar-perf over ~40 s (its report loop): the duration counts.
    assert throughput({"count": 30002, "rate": 740.16}, 30) == pytest.approx(1000.07, abs=0.01)
    # Blocked for minutes on a full queue: its own elapsed time counts (3,058,596 / 14,745.66 = 207 s).
    assert throughput({"count": 3058596, "rate": 14745.66}, 30) == pytest.approx(14745.66)
    assert throughput({}, 30) is None


def test_client_memory_knob(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_PERF_CLIENT_MEMORY", raising=False)
    assert Knobs.from_env().client_memory == "64M"
    monkeypatch.setenv("BENCH_PERF_CLIENT_MEMORY", "256M")
    assert Knobs.from_env().client_memory == "256M"
    for bad in ("0", "64 MB", "-1M", ""):
        monkeypatch.setenv("BENCH_PERF_CLIENT_MEMORY", bad)
        with pytest.raises(SystemExit, match="BENCH_PERF_CLIENT_MEMORY"):
            Knobs.from_env()
