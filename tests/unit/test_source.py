"""The nightly data source's rows (``worker.nightly.source``): its schema and the Arrow batches it yields."""

from __future__ import annotations

from datetime import UTC, datetime

from worker.nightly.source import SCHEMA, arrow_batches


def test_schema_keeps_undecodable_rows() -> None:
    nullable = {f.name: f.nullable for f in SCHEMA.fields}
    assert not nullable["message_id"] and not nullable["payload"]
    assert nullable["ledger_id"] and nullable["decode_error"]


def test_arrow_batches_keep_every_row_and_value() -> None:
    when = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
    good = (b"id", "1:2:0:-1", "t-partition-0", when, {"reason": "x"}, b"p", "t", "MANAGED_LEDGER", "LEDGER", 7)
    rows = [good + (None,) * 5, (b"id2", "1:3:0:-1", "t", None, {}, b"?") + (None,) * 8 + ("bad payload",)] * 3
    batches = list(arrow_batches(iter(rows), size=4))
    assert [b.num_rows for b in batches] == [4, 2]
    got = [r for b in batches for r in b.to_pylist()]
    assert [r["message_id_str"] for r in got] == [r[1] for r in rows]
    assert got[0]["publish_time"] == when and dict(got[0]["properties"]) == {"reason": "x"}
    assert got[1]["decode_error"] == "bad payload" and got[1]["ledger_id"] is None
    assert batches[0].schema.names == SCHEMA.fieldNames()
