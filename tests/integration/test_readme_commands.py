"""Every command the README's quick start shows, run as a user runs it, against the real local stack.

The list is read from the README itself, so a command added there without a test here fails the suite.
`make test` is this suite; `make stack-down` is what .ci/run calls after it (stopping the stack mid-suite
would take it from every later test).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO, Stack

pytestmark = pytest.mark.integration

COVERED_ELSEWHERE = {"test": "this suite itself", "stack-down": ".ci/run, after the suite"}


def quick_start_commands() -> list[str]:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^make ([a-z-]+)", section, flags=re.M)


def make(target: str, *, timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["make", target],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_every_quick_start_command_has_a_test() -> None:
    tested = {name.removeprefix("test_make_") for name in globals() if name.startswith("test_make_")}
    shown = set(quick_start_commands())
    assert shown, "the README has no quick start commands"
    untested = shown - {t.replace("_", "-") for t in tested} - set(COVERED_ELSEWHERE)
    assert not untested, f"README quick start commands without a test: {sorted(untested)}"


def test_make_check() -> None:
    # The inner loop starts no service: it runs with whatever stack is (or is not) up.
    r = make("check", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert re.search(r"\d+ passed", r.stdout), r.stdout[-2000:]
    assert "stack.sh" not in r.stdout + r.stderr


def test_make_system_packages() -> None:
    # .ci/run ran it before this suite: every command is there, so it installs nothing and exits 0.
    r = make("system-packages", timeout=60)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "apt-get" not in r.stdout
    present = make("system-packages-present", timeout=60)
    assert present.returncode == 0, present.stderr


def test_make_demo(stack: Stack) -> None:
    r = make("demo", timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    for line in ("queued", "of them belong to", "orphans left in the demo namespace: 0"):
        assert line in out, f"{line!r} missing from the demo's output:\n{out[-6000:]}"


def test_make_run(stack: Stack) -> None:
    """`make run` starts the worker in the foreground; Ctrl-C (SIGINT to the foreground group) drains it."""
    proc = subprocess.Popen(
        ["make", "run"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        ready = False
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with urllib.request.urlopen("http://127.0.0.1:8090/readyz", timeout=2) as resp:
                    ready = resp.status == 200
            except OSError:
                pass
            if ready:
                break
            time.sleep(0.5)
        assert ready, f"the worker never became ready (exit {proc.poll()})"
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # make itself takes the SIGINT too and re-raises it (as at a terminal): the worker's own clean stop is
    # what counts, and nothing may have been handed back undrained.
    assert proc.returncode in (0, -signal.SIGINT, 128 + signal.SIGINT), out[-3000:]
    assert "worker stopped" in out and "Traceback" not in out, out[-3000:]
    assert "unsettled messages handed back" not in out, out[-3000:]


def _regenerates_nothing(target: str, paths: list[str]) -> None:
    """Regenerating changes nothing that is committed (the generated files are current)."""
    files = [REPO / p for p in paths]
    before = {f: f.read_text() for f in files}
    r = make(target, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    for f in files:
        assert f.read_text() == before[f], f"{f.relative_to(REPO)} was stale: commit what `make {target}` writes"


def test_make_dashboards() -> None:
    _regenerates_nothing("dashboards", ["deploy/helm/ledger-deletion-worker/files/ledger-deletion.json"])


def test_make_config_reference() -> None:
    _regenerates_nothing("config-reference", ["docs/operations.md", "config/worker.example.yaml"])


def test_make_helm_chart() -> None:
    _regenerates_nothing(
        "helm-chart",
        [
            "deploy/helm/ledger-deletion-worker/values.yaml",
            "deploy/helm/ledger-deletion-worker/values.schema.json",
            "deploy/helm/pulsar-values/broker-extension.yaml",
            "deploy/helm/pulsar-values/broker-extension-mark-key.yaml",
        ],
    )


def test_make_bench(stack: Stack, tmp_path: Path) -> None:
    """`make bench` at smoke size: every bench runs and prints its comparisons; results kept out of the tree."""
    env = {
        "BENCH_N": "40",
        "BENCH_OWNER_N": "5",
        "BENCH_GONE_N": "300",
        "BENCH_GOALS_N": "60",
        "BENCH_TOPICS": "2",
        "BENCH_PER_TOPIC": "10",
        "BENCH_ZK_N": "60",
        "BENCH_S3_N": "30",
        "BENCH_HOT_N": "500",
        "BENCH_NIGHTLY_ARGS": "--quick",
        "BENCH_NIGHTLY_N": "200",
        "BENCH_NIGHTLY_M": "500",
        "BENCH_RESULTS_DIR": str(tmp_path),
    }
    r = make("bench", timeout=1500, env=env)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "compared against" in r.stdout, r.stdout[-4000:]
    for line in ("S3 route: worker", "the identity rule's floor", "CPU per settled message", "per-message pieces"):
        assert line in r.stdout, f"{line!r} missing: {r.stdout[-4000:]}"
    assert list(tmp_path.glob("*.json")), "no results kept"
