"""What the nightly jobs ship to Spark (``worker.nightly.spark``): never a secret. Not in the closures the executors
run (pickled into every task): executors read the Pulsar token and the S3 keys themselves, from the files the settings
name (or the AWS credential chain)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark import cloudpickle

from tests.unit.fakes import ACCESS, SECRET, TOKEN, assert_no_secret, settings_with_secret_files
from worker.nightly.audit import LEDGER_DECISION_SCHEMA, _judge_ledger_rows
from worker.nightly.audit_objects import OBJECT_SCHEMA, _judge_object_rows
from worker.nightly.replay import decide_partition, source_options
from worker.nightly.spark import InlineSecret, executor_settings, judged_partitions, settings_on_executor
from worker.settings import load_settings


def test_closures_shipped_to_executors_carry_no_secret(tmp_path: Path) -> None:
    s = settings_with_secret_files(tmp_path)
    for closure in (
        decide_partition(s, dry_run=False, concurrency=4),
        judged_partitions(s, LEDGER_DECISION_SCHEMA, _judge_ledger_rows(0.0, [])),
        judged_partitions(s, OBJECT_SCHEMA, _judge_object_rows(0.0)),
    ):
        assert_no_secret(cloudpickle.dumps(closure))  # type: ignore[no-untyped-call]


def test_an_executor_reads_the_secrets_from_the_files_itself(tmp_path: Path) -> None:
    s = settings_with_secret_files(tmp_path)
    payload = executor_settings(s)
    assert_no_secret(payload)
    on_executor = settings_on_executor(payload)
    assert on_executor.pulsar.auth_token == TOKEN
    [t] = on_executor.offload.s3_targets
    assert (t.access_key_id, t.secret_access_key) == (ACCESS, SECRET)
    # A rotated secret is what the executor reads, never a copy the driver made.
    (tmp_path / "token").write_text("rotated\n")
    assert settings_on_executor(payload).pulsar.auth_token == "rotated"


def test_an_inline_token_is_refused_not_shipped() -> None:
    s = load_settings(None, pulsar={"auth_token": TOKEN})
    for ship in (executor_settings, lambda s: source_options(s, s.topics.dlq, None)):
        with pytest.raises(InlineSecret) as e:
            ship(s)
        assert "pulsar.auth_token_file" in str(e.value)
        assert_no_secret(str(e.value))


def test_inline_s3_keys_are_refused_not_shipped() -> None:
    s = load_settings(
        None, offload={"s3_targets": [{"bucket": "b", "access_key_id": ACCESS, "secret_access_key": SECRET}]}
    )
    with pytest.raises(InlineSecret) as e:
        executor_settings(s)
    assert "offload.s3_targets[0].access_key_id_file" in str(e.value)
    assert_no_secret(str(e.value))
    with pytest.raises(InlineSecret):
        decide_partition(s, dry_run=False, concurrency=1)


def test_without_keys_the_aws_credential_chain_is_left_to_the_executor() -> None:
    s = load_settings(None, offload={"s3_targets": [{"bucket": "b"}]})
    [t] = settings_on_executor(executor_settings(s)).offload.s3_targets
    assert t.access_key_id is None and t.secret_access_key is None
