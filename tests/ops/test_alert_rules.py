"""promtool check / test of the alert rules, deploy/helm/ledger-deletion-worker/files/ (Debian's promtool:
`make system-packages`)."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml

from tests.conftest import REPO
from tests.ops.promql import alert_rules

RULES_DIR = REPO / "deploy" / "helm" / "ledger-deletion-worker" / "files"
RULES = RULES_DIR / "ledger-deletion-rules.yml"
RULE_TESTS = RULES_DIR / "ledger-deletion-rules.test.yml"
OPERATIONS = REPO / "docs" / "operations.md"

# The severity chosen for each alert; docs/operations.md gives the reason next to the alert. critical: act now
# (a deletion request storage does not vouch for; nothing drains the queue, e.g. every replica refused to
# start); warning: act within working hours (nothing lost, reclaim slowed); info: nothing to repair yet.
SEVERITY = {
    "LedgerDeletionRejectedMessages": "critical",
    "LedgerDeletionNoReplicaConsuming": "critical",
    "LedgerDeletionDLQGrowing": "warning",
    "LedgerDeletionFailureRatioHigh": "warning",
    "LedgerDeletionOldestPendingTooOld": "warning",
    "LedgerDeletionWorkerDown": "warning",
    "LedgerDeletionWorkerNotReady": "warning",
    "LedgerDeletionNightlyMissed": "warning",
    "LedgerDeletionNightlyFailed": "warning",
    "LedgerDeletionNightlyNeverSucceeded": "info",
}
# A path inside the repository and an anchor there, behind the only configurable part: the evaluating
# Prometheus' external label runbook_base (empty when unset, so the default stays inside the repository).
RUNBOOK_URL = re.compile(r"\{\{ \$externalLabels\.runbook_base \}\}(?P<path>[\w./-]+)#(?P<anchor>[\w-]+)")


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool missing: `make system-packages` installs Debian's prometheus package"
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
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), name
        assert f"`{name}`" in readme, f"{name}: docs/operations.md has no line on what to do when it fires"


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file (lower case, punctuation dropped, spaces to
    hyphens; a repeated heading gets -1, -2...), fenced code blocks skipped."""
    anchors: set[str] = set()
    fenced = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"#{1,6} +(.+?) *#*$", line)
        if m:
            slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
            n, candidate = 0, slug
            while candidate in anchors:
                n += 1
                candidate = f"{slug}-{n}"
            anchors.add(candidate)
    return anchors


def _section(markdown: str, heading: str) -> str:
    """The text under ``### heading`` up to the next heading."""
    m = re.search(rf"^### {re.escape(heading)}\n(.*?)(?=^#)", markdown + "\n#", re.M | re.S)
    assert m, f"docs/operations.md has no heading ### {heading}"
    return m.group(1)


def test_every_alert_is_actionable() -> None:
    """Each rule carries what an on-call engineer needs: a summary, a description, a severity chosen for it
    (the table above, justified in the docs next to the alert) and a runbook_url whose path and anchor exist
    in this repository and lead to that alert's own section."""
    docs = OPERATIONS.read_text()
    anchors = github_anchors(docs)
    rules = alert_rules(RULES)
    assert {r["alert"] for r in rules} == set(SEVERITY), "a new alert needs its severity chosen here"
    for rule in rules:
        name = rule["alert"]
        ann = rule.get("annotations") or {}
        for key in ("runbook_url", "summary", "description"):
            assert str(ann.get(key, "")).strip(), f"{name}: annotation {key} missing"
        assert rule["labels"]["severity"] == SEVERITY[name], name
        m = RUNBOOK_URL.fullmatch(ann["runbook_url"])
        assert m, f"{name}: runbook_url {ann['runbook_url']!r} is not runbook_base + a repository path#anchor"
        assert (REPO / m["path"]).is_file() and m["path"] == "docs/operations.md", name
        assert m["anchor"] in anchors, f"{name}: no heading with anchor #{m['anchor']} in docs/operations.md"
        assert m["anchor"] == name.lower(), f"{name}: the runbook must open at the alert's own section"
        assert f"Severity: `{SEVERITY[name]}`" in _section(docs, name), f"{name}: severity not justified in docs"
        # Nothing in a rule points outside the repository: the only host part is the operator's runbook_base.
        assert not any("://" in str(v) for v in ann.values()), name


def test_github_anchors() -> None:
    md = "# Ops: deploy\n### LedgerDeletionDLQGrowing\n```\n# not a heading\n```\n## Ops: deploy\n"
    assert github_anchors(md) == {"ops-deploy", "ledgerdeletiondlqgrowing", "ops-deploy-1"}
