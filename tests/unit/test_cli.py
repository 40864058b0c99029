"""The CLI (``worker.cli``) refuses bad configuration at start, naming the key, before touching any backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.fakes import TOKEN
from worker.cli import main
from worker.nightly import spark


def test_bad_config_exits_2_naming_every_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("worker:\n  max_inflight: lots\n  bogus: 1\n")
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "worker.max_inflight" in err and "worker.bogus" in err


def test_bad_environment_override_names_the_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LDW_PULSAR__ADMIN_URL", "notaurl")
    assert main(["inflight", "--config", str(Path(__file__).parents[2] / "config" / "worker.example.yaml")]) == 2
    assert "pulsar.admin_url" in capsys.readouterr().err


def test_missing_config_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--config", str(tmp_path / "nope.yaml")]) == 2
    assert "config file not found" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["run", "scan", "scan-offloaded", "send", "inflight", "purge-topic"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    assert "--config" in capsys.readouterr().out


def test_config_resolution_never_looks_in_the_current_directory(tmp_path: Path) -> None:
    from worker.commands.config_file import resolve_config

    assert resolve_config("rel.yaml", {}) == (Path.cwd() / "rel.yaml", "--config")
    assert resolve_config("a.yaml", {"LDW_CONFIG": "/etc/b.yaml"}) == (Path.cwd() / "a.yaml", "--config")
    assert resolve_config(None, {"LDW_CONFIG": "/etc/b.yaml"}) == (Path("/etc/b.yaml"), "$LDW_CONFIG")
    assert resolve_config(None, {}) == (None, "built-in defaults")


def test_missing_ldw_config_names_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LDW_CONFIG", str(tmp_path / "gone.yaml"))
    assert main(["inflight"]) == 2
    err = capsys.readouterr().err
    assert f"config file not found: {tmp_path / 'gone.yaml'} (from $LDW_CONFIG)" in err


@pytest.mark.parametrize("command", ["replay-dlq", "audit"])
def test_the_commands_refuse_an_inline_secret_before_spark_starts(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_spark(*_a: object, **_k: object) -> None:
        raise AssertionError("a Spark session was started")

    monkeypatch.setattr(spark, "session", no_spark)
    cfg = tmp_path / "worker.yaml"
    cfg.write_text(f"pulsar:\n  auth_token: {TOKEN}\n")
    assert main([command, "--config", str(cfg), "--report-dir", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "pulsar.auth_token_file" in err and TOKEN not in err
