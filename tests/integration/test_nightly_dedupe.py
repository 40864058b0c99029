"""The replay's grouping of dead letters on Spark (ANSI mode, as Spark 4 runs by default): properties are
whatever a publisher wrote, so one hostile dead letter must not fail the night's replay for all the others."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from worker.formats.message import FIRST_SEEN_MS, RECONSUMETIMES
from worker.nightly.replay import dedupe
from worker.nightly.source import SCHEMA


def _row(i: int, props: dict[str, str]) -> tuple[Any, ...]:
    given = {
        "message_id": f"id-{i}".encode(),
        "message_id_str": f"id-{i}",
        "partition_topic": "persistent://pulsar/system/__ledger_deletion-DLQ",
        "publish_time": datetime(2026, 11, 24, tzinfo=UTC),
        "properties": props,
        "payload": f"payload-{i}".encode(),
        "topic_name": "persistent://t/n/x",
        "ledger_component": "MANAGED_LEDGER",
        "ledger_type": "LEDGER",
        "ledger_id": 100 + i,
    }
    return tuple(given.get(f.name) for f in SCHEMA.fields)


def test_hostile_numbers_in_properties_read_as_absent_or_clamped(spark: Any) -> None:
    rows = [
        _row(0, {RECONSUMETIMES: "abc", FIRST_SEEN_MS: "not-a-time"}),
        _row(1, {RECONSUMETIMES: "9" * 40, FIRST_SEEN_MS: "9" * 40}),
        _row(2, {RECONSUMETIMES: "-5", FIRST_SEEN_MS: "-1"}),
        _row(3, {RECONSUMETIMES: "3", FIRST_SEEN_MS: "1795000000000"}),
        _row(4, {RECONSUMETIMES: "NaN", FIRST_SEEN_MS: "Infinity"}),
    ]
    before = int(time.time() * 1000)
    got = {r["ledger_id"]: r for r in dedupe(spark.createDataFrame(rows, SCHEMA), 2).collect()}
    assert got[100]["attempts"] == 0  # garbage counts as no attempt, as the daemon reads it
    assert got[101]["attempts"] == 2**31 - 1  # clamped, not an overflow
    assert got[102]["attempts"] == 0
    assert got[103]["attempts"] == 3
    published = int(datetime(2026, 11, 24, tzinfo=UTC).timestamp() * 1000)
    assert int(got[100]["first_seen"].timestamp() * 1000) == published  # garbage: the publish time
    assert int(got[101]["first_seen"].timestamp() * 1000) <= int(time.time() * 1000)  # never in the future
    assert int(got[101]["first_seen"].timestamp() * 1000) >= before - 60_000
    assert int(got[102]["first_seen"].timestamp() * 1000) == 0
    assert int(got[103]["first_seen"].timestamp() * 1000) == 1795000000000
    assert got[104]["attempts"] == 0
    assert int(got[104]["first_seen"].timestamp() * 1000) <= int(time.time() * 1000)
