"""What tools.upgrade_run reads from pulsar-perf's output and the brokers' logs: lines they printed in real runs."""

from __future__ import annotations

from datetime import UTC, datetime

from tools.upgrade_run import (
    _RECEIVED,
    _SENT,
    deleted_unloaded,
    let_go_unqueued,
    log_lines_naming,
    perf_total,
    perf_windows,
)

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

LET_GO = (
    "2026-11-28T06:33:21,463+0000 [pulsar-timer-79-1] WARN  org.ledgerdeletion.broker.MarkingMetaStore - [ledger-de"
    "letion] [public/upg-unsubscr-22-2a0c/persistent/t1] ledger list written keeping 0 ledger copies listed: they c"
    "ould not be queued (java.util.concurrent.CompletionException: org.apache.pulsar.client.api.PulsarClientExcepti"
    "on$TimeoutException: The producer ldw-upgrade-2-233 can not send message to the topic persistent://pulsar/syst"
    "em/__ledger_deletion-partition-3 within given timeout : createdAt 0.36 seconds ago, firstSentAt 0.0 seconds ag"
    "o, lastSentAt 0.0 seconds ago, retryCount 0); empty ones the broker deletes itself, unqueued: [LEDGER:28806 of"
    " persistent://public/upg-unsubscr-22-2a0c/t1]"
)
# 5.0.0-M1's ManagedLedgerImpl with the stack's layout: the structured attributes after the message.
CREATED = (
    "2026-11-28T06:32:50,621+0000 [BookKeeperClientWorker-OrderedExecutor-1-0] INFO  org.apache.bookkeeper.mledger"
    ".impl.ManagedLedgerImpl - Created new ledger {ledgerId=28806,"
    " managedLedger=public/upg-unsubscr-22-2a0c/persistent/t1, topic=persistent://public/upg-unsubscr-22-2a0c/t1}"
)


def test_each_periodic_line_gives_its_time_and_publish_p99() -> None:
    at = datetime(2026, 11, 28, 1, 14, 56, tzinfo=UTC).timestamp()
    assert perf_windows("\n".join(["noise", PRODUCED, SENT])) == [(at, 429.173)]


def test_the_totals_are_the_last_aggregated_counts() -> None:
    log = "\n".join([PRODUCED, SENT, RECEIVED])
    assert perf_total(log, _SENT) == 30108
    assert perf_total(log, _RECEIVED) == 30168
    assert perf_total(PRODUCED, _SENT) is None  # killed before its shutdown hook printed


def test_the_empty_ledgers_an_extension_let_go_are_read_from_its_warning() -> None:
    logs = {"broker2": "\n".join([CREATED, LET_GO, LET_GO.replace("[LEDGER:28806 of", "[LEDGER:5 of")])}
    assert let_go_unqueued(logs) == {28806, 5}
    assert let_go_unqueued({"broker1": CREATED}) == set()


def test_the_lines_naming_a_ledger_are_found_by_its_whole_id() -> None:
    logs = {"broker1": "\n".join([CREATED, "ledger 288061", "ledger 12880", LET_GO])}
    assert log_lines_naming(logs, 28806) == [f"broker1: {CREATED}", f"broker1: {LET_GO[:400]}"]
    assert log_lines_naming(logs, 2880) == []


def test_the_topics_deleted_while_unloaded_are_read_from_either_lines_log() -> None:
    # 5.0.0-M1's line from a real run; 4.0.8's as its BrokerService writes it.
    new = (
        "2026-11-28T06:59:44,431+0000 [metadata-store-event-10-1] INFO  org.apache.pulsar.broker.service.BrokerService"
        " - Topic is not loaded, try to delete from metadata {topic=persistent://public/upg-topic-de-51-b910/t0}"
    )
    old = (
        "2026-11-28T01:00:00,000+0000 [pulsar-web-41-3] INFO  org.apache.pulsar.broker.service.BrokerService - Topic"
        " persistent://public/upg-topic-de-2-aaaa/t1 is not loaded, try to delete from metadata"
    )
    assert deleted_unloaded({"broker1": old, "broker2": "\n".join([CREATED, new])}) == {
        "persistent://public/upg-topic-de-51-b910/t0",
        "persistent://public/upg-topic-de-2-aaaa/t1",
    }
    assert deleted_unloaded({"broker1": LET_GO}) == set()
