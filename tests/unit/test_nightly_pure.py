"""Pure parts of the nightly jobs: the source's position bookkeeping, the /ledgers path arithmetic, the
offload object names, the replay's summary. (The jobs themselves run on the real stack in
tests/integration/test_nightly_*.py.)"""

from __future__ import annotations

import pytest

from worker.backends.ledger_listing import ledger_id_of_path as _ledger_id
from worker.formats.metadata_paths import hierarchical_ledger_path
from worker.nightly.audit_objects import OFFLOAD_KEY
from worker.nightly.replay import ReplaySummary, per_task_settings, task_slots_per_executor
from worker.nightly.source import SCHEMA, arrow_batches
from worker.nightly.source_plan import TopicPartition, _position
from worker.settings import load_settings


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


@pytest.mark.parametrize(
    ("conf", "master", "slots"),
    [
        ({}, "local[2]", 2),
        ({}, "local[3,2]", 3),  # local[N,maxFailures]
        ({"spark.task.cpus": "2"}, "local[4]", 2),
        ({"spark.executor.cores": "4"}, "yarn", 4),
        ({"spark.executor.cores": "4", "spark.task.cpus": "3"}, "k8s://https://kube:6443", 1),
        ({}, "yarn", 1),
        ({}, "spark://m:7077", 1),
    ],
)
def test_task_slots_per_executor(conf: dict[str, str], master: str, slots: int) -> None:
    assert task_slots_per_executor(conf, master) == slots


def test_storage_rate_limit_is_shared_by_an_executors_tasks() -> None:
    s = load_settings(None, worker={"deletes_per_second": 50, "delete_burst": 10})
    assert per_task_settings(s, 1) is s
    t = per_task_settings(s, 4)
    assert (t.worker.deletes_per_second, t.worker.delete_burst) == (12.5, 2)
    assert 4 * t.worker.deletes_per_second == s.worker.deletes_per_second
    assert per_task_settings(s, 16).worker.delete_burst == 1  # never 0: a bucket of 0 would never delete
    assert t.model_dump(exclude={"worker"}) == s.model_dump(exclude={"worker"})


def test_arrow_batches_keep_every_row_and_value() -> None:
    from datetime import UTC, datetime

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
