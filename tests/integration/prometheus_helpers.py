"""Helpers shared by the tests that run a real Prometheus (Debian's, on loopback): test_prometheus.py here and
tests/cluster/test_leak_panel.py. The Pushgateway fixture both use is in tests/integration/conftest.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from testkit.harness import free_port
from tests.conftest import REPO

# The dashboard as committed (tools/dashboards.py writes it).
DASHBOARD = REPO / "deploy" / "helm" / "ledger-deletion-worker" / "files" / "ledger-deletion.json"
# A series selector: a metric name with or without matchers, or matchers alone ({__name__=~...}).
SELECTOR = re.compile(r"\b((?:ledger_deletion|pulsar|bookie)_[a-zA-Z0-9_]+|up)\b(\{[^}]*\})?|(\{__name__[^}]*\})")


def binary(name: str) -> str:
    """The path of a Debian command the Prometheus tests run; a failure naming the target that installs it."""
    path = shutil.which(name)
    assert path, f"{name} missing: `make system-packages` installs Debian's prometheus and prometheus-pushgateway"
    return path


def wait_http(url: str, timeout: float = 30) -> None:
    """Wait until ``url`` answers 200 (within ``timeout`` seconds, else fail)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError(f"{url} did not answer within {timeout}s")


class Prom:
    """Prometheus's HTTP API at ``url``: raw GETs, instant queries, series."""

    def __init__(self, url: str) -> None:
        self.url = url

    def get(self, path: str, **params: str) -> Any:
        q = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{q}", timeout=30) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:  # a bad query answers 400 with the parse error in the body
            return json.load(e)

    def query(self, expr: str) -> Any:
        return self.get("/api/v1/query", query=expr)

    def series(self, selector: str) -> list[dict[str, str]]:
        body = self.get("/api/v1/series", **{"match[]": selector, "start": str(time.time() - 600)})
        assert body["status"] == "success", (selector, body)
        return list(body["data"])


def run_prometheus(tmp_path: Path, cfg: dict[str, Any]) -> tuple[Prom, subprocess.Popen[bytes]]:
    """Debian's Prometheus on a free loopback port with ``cfg`` (its data and log under ``tmp_path``), ready."""
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(cfg))
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")
    proc = subprocess.Popen(
        [
            binary("prometheus"),
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready", timeout=60)
    except BaseException:
        proc.kill()
        raise
    return Prom(f"http://127.0.0.1:{port}"), proc


def selectors(expr: str) -> list[str]:
    """The series selectors in a PromQL expression (``SELECTOR``), in order."""
    out = []
    for m in SELECTOR.finditer(expr):
        if m.group(3):
            out.append(m.group(3))
        else:
            out.append(m.group(1) + (m.group(2) or ""))
    return out
