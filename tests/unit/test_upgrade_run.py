"""What tools.upgrade_run reads from pulsar-perf's output: lines pulsar-perf 4.0.8 printed in a real run."""

from __future__ import annotations

from datetime import UTC, datetime

from tools.upgrade_run import _RECEIVED, _SENT, perf_total, perf_windows

PRODUCED = (
    "2026-11-28T01:14:56,847+0000 [main] INFO  org.apache.pulsar.testclient.PerformanceProducer - Throughput"
    " produced:     292 msg ---     29.1 msg/s ---      0.2 Mbit/s  --- failure      0.0 msg/s --- Latency: mean:"
    "  95.068 ms - med:  52.088 - 95pct: 290.395 - 99pct: 429.173 - 99.9pct: 676.267 - 99.99pct: 676.267 - Max:"
    " 676.267"
)
SENT = (
    "2026-11-28T01:27:24,009+0000 [perf-client-shutdown] INFO  org.apache.pulsar.testclient.PerformanceProducer -"
    " Aggregated throughput stats --- 30108 records sent --- 39.749 msg/s --- 0.311 Mbit/s "
)
RECEIVED = (
    "2026-11-28T01:27:54,334+0000 [perf-client-shutdown] INFO  org.apache.pulsar.testclient.PerformanceConsumer -"
    " Aggregated throughput stats --- 30168 records received --- 37.412 msg/s --- 0.292 Mbit/s --- AckRate:"
    " 37.41166900854263  msg/s --- ack failed 0 msg"
)


def test_each_periodic_line_gives_its_time_and_publish_p99() -> None:
    at = datetime(2026, 11, 28, 1, 14, 56, tzinfo=UTC).timestamp()
    assert perf_windows("\n".join(["noise", PRODUCED, SENT])) == [(at, 429.173)]


def test_the_totals_are_the_last_aggregated_counts() -> None:
    log = "\n".join([PRODUCED, SENT, RECEIVED])
    assert perf_total(log, _SENT) == 30108
    assert perf_total(log, _RECEIVED) == 30168
    assert perf_total(PRODUCED, _SENT) is None  # killed before its shutdown hook printed
