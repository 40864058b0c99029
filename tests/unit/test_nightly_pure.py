"""Pure parts of the nightly jobs: the source's position bookkeeping, the /ledgers path arithmetic, the
offload object names, the replay's summary. (The jobs themselves run on the real stack in
tests/integration/test_nightly_*.py.)"""

from __future__ import annotations

import pytest

from worker.ledger_listing import ledger_id_of_path as _ledger_id
from worker.nightly.audit import OFFLOAD_KEY
from worker.nightly.replay import ReplaySummary
from worker.nightly.source import SCHEMA, TopicPartition, _position
from worker.zookeeper import hierarchical_ledger_path


def test_partition_skips_what_the_subscription_acknowledged() -> None:
    p = TopicPartition("t", end=(9, 5), start=(3, 4), acked=(((5, 1), (5, 3)),))
    assert p.skip((3, 4)) and p.skip((2, 9))  # at or before the mark-delete position
    assert not p.skip((3, 5))
    assert not p.skip((5, 1)) and p.skip((5, 2)) and p.skip((5, 3))  # (a..b] as Pulsar prints it
    assert not p.skip((5, 4))
    assert not TopicPartition("t", end=(1, 0), start=None).skip((0, 0))


@pytest.mark.parametrize(
    ("value", "pos"), [("12:-1", (12, -1)), ("3:7", (3, 7)), ("", None), ("x:1", None), ("1:2:3", None)]
)
def test_position(value: str, pos: tuple[int, int] | None) -> None:
    assert _position(value) == pos


@pytest.mark.parametrize("lid", [0, 42, 9_999, 10_000, 2**31 - 2, 2**31 - 1, 2**40 + 7])
def test_ledger_id_from_its_znode_path(lid: int) -> None:
    assert _ledger_id("/ledgers", hierarchical_ledger_path(lid, "/ledgers")) == lid
    assert _ledger_id("/bench-x", hierarchical_ledger_path(lid, "/bench-x")) == lid


def test_offload_object_names() -> None:
    u = "0b8a6f9e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
    m = OFFLOAD_KEY.match(f"{u}-ledger-17")
    assert m and m.group("uuid") == u and m.group("id") == "17" and not m.group("index")
    m = OFFLOAD_KEY.match(f"{u}-ledger-17-index")
    assert m and m.group("index")
    assert OFFLOAD_KEY.match(f"{u}-ledger-x") is None
    assert OFFLOAD_KEY.match(f"prefix/{u}-ledger-1") is None


def test_schema_keeps_undecodable_rows() -> None:
    nullable = {f.name: f.nullable for f in SCHEMA.fields}
    assert not nullable["message_id"] and not nullable["payload"]
    assert nullable["ledger_id"] and nullable["decode_error"]


def test_summary_table_says_what_is_settled() -> None:
    s = ReplaySummary("r1", "2026-11-23", False, read=4, rows={"deleted": 2, "in_use": 1}, messages={"deleted": 3})
    s.messages["in_use"] = 1
    s.acknowledged = 3
    t = s.table()
    assert "deleted               2         3  ack" in t
    assert "in_use                1         1  stays" in t
    assert "acknowledged 3" in t


def test_report_dirs_of_both_jobs_stay_apart() -> None:
    from worker.commands.replay_dlq import report_dir
    from worker.settings import load_settings

    s = load_settings(None, nightly={"report_dir": "s3a://bucket/reports/"})
    assert report_dir(None, s, "replay") == "s3a://bucket/reports/replay"
    assert report_dir("/tmp/r", s, "audit") == "/tmp/r/audit"
    assert report_dir("/tmp/r/", s, "replay") == "/tmp/r/replay"
