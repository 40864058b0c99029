"""The nightly replay job's pure parts (``worker.nightly.replay``): its summary, its tasks' share of the storage rate
limit, and the data source options it passes. (The job itself runs on the real stack in
tests/integration/test_nightly_*.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.fakes import assert_no_secret, settings_with_secret_files
from worker.nightly.replay import ReplaySummary, per_task_settings, source_options, task_slots_per_executor
from worker.settings import load_settings


def test_summary_table_says_what_is_settled() -> None:
    s = ReplaySummary("r1", "2026-11-23", False, read=4, rows={"deleted": 2, "in_use": 1}, messages={"deleted": 3})
    s.messages["in_use"] = 1
    s.acknowledged = 3
    t = s.table()
    assert "deleted               2         3  ack" in t
    assert "in_use                1         1  stays" in t
    assert "acknowledged 3" in t


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


def test_data_source_options_carry_the_token_file_not_the_token(tmp_path: Path) -> None:
    s = settings_with_secret_files(tmp_path)
    opts = source_options(s, s.topics.dlq, s.topics.dlq_replay_subscription)
    assert_no_secret(repr(opts))
    assert opts["token_file"] == str(tmp_path / "token")
