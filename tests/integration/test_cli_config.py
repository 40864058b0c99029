"""Which configuration the CLI uses, run the way an operator runs it: from any directory.

A relative default path resolved from the current directory made ``send`` fall back silently to the
built-in production topics when run outside the repository. The rule now: ``--config FILE`` must exist;
without it ``$LDW_CONFIG`` (which must exist too); with neither, built-in defaults plus ``LDW_*``
variables, and the command says so on stderr. Nothing is ever looked up relative to the current directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import worker_config

pytestmark = pytest.mark.integration


def cli_from(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LDW_")}
    # The checkout on the path, not in the cwd: as an installed command would run.
    base["PYTHONPATH"] = str(REPO)
    return subprocess.run(
        [sys.executable, "-m", "worker.cli", *args],
        cwd=cwd,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )


SEND = ["send", "--topic", "persistent://public/default/x", "--ledger-id", "1", "--component", "MANAGED_LEDGER"]


def test_a_missing_config_file_is_an_error_naming_the_path(tmp_path: Path) -> None:
    r = cli_from(tmp_path, *SEND, "--config", "nope.yaml")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"config file not found: {tmp_path / 'nope.yaml'}" in r.stderr
    assert "--config" in r.stderr
    assert "queued" not in r.stdout


def test_a_missing_ldw_config_file_is_an_error_naming_the_variable(tmp_path: Path) -> None:
    # inflight only reads: where $LDW_CONFIG is ignored it must not queue anything on the built-in topics.
    r = cli_from(tmp_path, "inflight", "--json", env={"LDW_CONFIG": str(tmp_path / "gone.yaml")})
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"config file not found: {tmp_path / 'gone.yaml'}" in r.stderr and "LDW_CONFIG" in r.stderr


def test_ldw_config_is_used_from_any_directory(unique: str, tmp_path: Path, make_worker: WorkerFactory) -> None:
    h = worker_config(make_worker, f"cli-cfg-{unique}")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = cli_from(elsewhere, "inflight", "--json", env={"LDW_CONFIG": str(h.config_path)})
    assert r.returncode == 0, r.stderr[-2000:]
    topics = {p["role"]: p["topic"] for p in json.loads(r.stdout)["parts"]}
    assert topics == {"pending": h.topics["pending"], "retry": h.topics["retry"], "dlq": h.topics["dlq"]}
    # Wide enough that argparse does not wrap the path at its hyphens.
    env = {"LDW_CONFIG": str(h.config_path), "COLUMNS": "1000"}
    assert str(h.config_path) in cli_from(elsewhere, "send", "--help", env=env).stdout


def test_without_any_config_the_command_says_it_uses_built_in_defaults(stack: Stack, tmp_path: Path) -> None:
    # inflight only reads: safe to run against the built-in (production-named) topics of the shared stack.
    r = cli_from(tmp_path, "inflight", "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "built-in defaults" in r.stderr
    assert "built-in defaults" in " ".join(cli_from(tmp_path, "send", "--help").stdout.split())
    # And from the repository itself no file is picked up behind the operator's back either.
    r = cli_from(REPO, "inflight", "--json")
    assert "built-in defaults" in r.stderr
