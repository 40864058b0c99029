"""promtool check / test of deploy/prometheus (Debian's promtool: `make ops-tools`)."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.conftest import REPO
from tests.ops.promql import alert_rules

RULES_DIR = REPO / "deploy" / "prometheus"
RULES = RULES_DIR / "ledger-deletion-rules.yml"
RULE_TESTS = RULES_DIR / "ledger-deletion-rules.test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool missing: `make ops-tools` installs Debian's prometheus package"
    return path


def test_rules_check(promtool: str) -> None:
    r = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"SUCCESS: {len(alert_rules(RULES))} rules found" in r.stdout


def test_rules_unit_tests(promtool: str) -> None:
    r = subprocess.run([promtool, "test", "rules", RULE_TESTS.name], cwd=RULES_DIR, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_every_alert_has_a_firing_unit_test_and_a_runbook_line() -> None:
    tests = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if a.get("exp_alerts")}
    quiet = {a["alertname"] for t in tests for a in t.get("alert_rule_test", []) if not a.get("exp_alerts")}
    readme = (REPO / "docs" / "operations.md").read_text()
    for rule in alert_rules(RULES):
        name = rule["alert"]
        assert name in fired, f"{name}: no promtool test where it fires"
        assert name in quiet, f"{name}: no promtool test where it stays quiet"
        assert rule["labels"]["severity"] in ("warning", "critical"), name
        assert f"`{name}`" in readme, f"{name}: docs/operations.md has no line on what to do when it fires"
