"""The nightly jobs never ship a secret to Spark: not in the data source's options (they show in query
plans and event logs), not in the closures the executors run (pickled into every task). Executors read
the Pulsar token and the S3 keys themselves, from the files the settings name (or the AWS credential
chain)."""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark import cloudpickle

from worker.nightly.audit import LEDGER_DECISION_SCHEMA, _judge_ledger_rows
from worker.nightly.audit_objects import OBJECT_SCHEMA, _judge_object_rows
from worker.nightly.replay import decide_partition, source_options
from worker.nightly.spark import InlineSecret, executor_settings, judged_partitions, settings_on_executor
from worker.settings import Settings, load_settings

TOKEN = "eyJ.SECRET-TOKEN.sig"
ACCESS = "AKIA-SECRET-ACCESS"
SECRET = "SECRET-KEY-material"


def _file(tmp: Path, name: str, value: str) -> str:
    p = tmp / name
    p.write_text(value + "\n")
    return str(p)


def _settings(tmp: Path) -> Settings:
    return load_settings(
        None,
        pulsar={"auth_token_file": _file(tmp, "token", TOKEN)},
        offload={
            "s3_targets": [
                {
                    "bucket": "b",
                    "endpoint": "http://127.0.0.1:9000",
                    "access_key_id_file": _file(tmp, "access", ACCESS),
                    "secret_access_key_file": _file(tmp, "secret", SECRET),
                }
            ]
        },
    )


def _assert_no_secret(blob: bytes | str) -> None:
    b = blob.encode() if isinstance(blob, str) else blob
    for s in (TOKEN, ACCESS, SECRET):
        assert s.encode() not in b, f"{s} travels to Spark"


def test_the_driver_reads_the_secrets_from_their_files(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    assert s.pulsar.auth_token == TOKEN
    [t] = s.offload.s3_targets
    assert (t.access_key_id, t.secret_access_key) == (ACCESS, SECRET)
    assert TOKEN not in repr(s) and SECRET not in repr(s)


def test_data_source_options_carry_the_token_file_not_the_token(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    opts = source_options(s, s.topics.dlq, s.topics.dlq_replay_subscription)
    _assert_no_secret(repr(opts))
    assert opts["token_file"] == str(tmp_path / "token")


def test_closures_shipped_to_executors_carry_no_secret(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    for closure in (
        decide_partition(s, dry_run=False, concurrency=4),
        judged_partitions(s, LEDGER_DECISION_SCHEMA, _judge_ledger_rows(0.0, [])),
        judged_partitions(s, OBJECT_SCHEMA, _judge_object_rows(0.0)),
    ):
        _assert_no_secret(cloudpickle.dumps(closure))  # type: ignore[no-untyped-call]


def test_an_executor_reads_the_secrets_from_the_files_itself(tmp_path: Path) -> None:
    s = _settings(tmp_path)
    payload = executor_settings(s)
    _assert_no_secret(payload)
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
        _assert_no_secret(str(e.value))


def test_inline_s3_keys_are_refused_not_shipped() -> None:
    s = load_settings(
        None, offload={"s3_targets": [{"bucket": "b", "access_key_id": ACCESS, "secret_access_key": SECRET}]}
    )
    with pytest.raises(InlineSecret) as e:
        executor_settings(s)
    assert "offload.s3_targets[0].access_key_id_file" in str(e.value)
    _assert_no_secret(str(e.value))
    with pytest.raises(InlineSecret):
        decide_partition(s, dry_run=False, concurrency=1)


def test_without_keys_the_aws_credential_chain_is_left_to_the_executor() -> None:
    s = load_settings(None, offload={"s3_targets": [{"bucket": "b"}]})
    [t] = settings_on_executor(executor_settings(s)).offload.s3_targets
    assert t.access_key_id is None and t.secret_access_key is None


@pytest.mark.parametrize("command", ["replay-dlq", "audit"])
def test_the_commands_refuse_an_inline_secret_before_spark_starts(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.cli import main
    from worker.nightly import spark

    def no_spark(*_a: object, **_k: object) -> None:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(spark, "session", no_spark)
    cfg = tmp_path / "worker.yaml"
    cfg.write_text(f"pulsar:\n  auth_token: {TOKEN}\n")
    assert main([command, "--config", str(cfg), "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "pulsar.auth_token_file" in err and TOKEN not in err
