"""`make bench-extension` at smoke size (about 70 s on top of the extension's build): it brings up its two
instances (stock and extension brokers), runs every workload on both in two alternated rounds, prints each
figure side by side with its ratio, checks that the extension queued every ledger its trims dropped, keeps
its JSON out of the tree and stops what it started. Its instances have ports and data directories apart
from a full-size `make bench-extension`'s (a run there would measure this one's load)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

from bench.extension import MODES, instance_env
from testkit.stack import REPO

SMOKE = {
    "BENCH_EXT_ROUNDS": "2",
    "BENCH_EXT_MSGS": "100",
    "BENCH_EXT_BATCHED_MSGS": "1000",
    "BENCH_EXT_PACED_MSGS": "50",
    "BENCH_EXT_RATE": "100",
    "BENCH_EXT_TRIM_TOPICS": "3",
    "BENCH_EXT_TRIM_LEDGERS": "2",
}
SMOKE_PORTS = {
    "STOCK": {
        "WEB_PORT": "28091",
        "BROKER_PORT": "26661",
        "BOOKIE_PORT": "23191",
        "BOOKIE_HTTP_PORT": "28011",
        "ZK_PORT": "22191",
        "S3_PORT": "25011",
        "STACK_DIR": str(REPO / "deploy/local/.data-bench-smoke-stock"),
    },
    "EXT": {
        "WEB_PORT": "29091",
        "BROKER_PORT": "27661",
        "BOOKIE_PORT": "24191",
        "BOOKIE_HTTP_PORT": "29011",
        "ZK_PORT": "24182",
        "S3_PORT": "25021",
        "STACK_DIR": str(REPO / "deploy/local/.data-bench-smoke-extension"),
    },
}
SMOKE_ENV = {f"LDW_BENCH_{side}_{k}": v for side, kv in SMOKE_PORTS.items() for k, v in kv.items()}


def _bound(port: str) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", int(port))) == 0


def test_make_bench_extension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if os.environ.get("LDW_EXTENSION") == "0":
        pytest.skip("LDW_EXTENSION=0: the broker-extension tests are off")
    for k, v in SMOKE_ENV.items():
        monkeypatch.setenv(k, v)
    ports = [instance_env(m)[k] for m in MODES for k in ("WEB_PORT", "BROKER_PORT")]
    assert "28091" in ports and "29091" in ports
    was_up = [p for p in ports if _bound(p)]
    r = subprocess.run(
        ["make", "bench-extension"],
        cwd=REPO,
        env={**os.environ, **SMOKE, **SMOKE_ENV, "BENCH_RESULTS_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = r.stdout
    assert r.returncode == 0, out[-4000:] + r.stderr[-4000:]
    assert "compared against: the same workloads on stock brokers" in out, out[-4000:]
    for label in ("non-batched: produce", "batched: publish latency p99", "trim: topics trimmed"):
        assert re.search(rf"^{re.escape(label)} .+x ", out, flags=re.M), f"no '{label}' row:\n{out[-4000:]}"
    queue = re.search(r"the extension instance's queue holds (\d+) of the (\d+) ledgers", out)
    assert queue and queue.group(1) == queue.group(2) == "12", out[-2000:]
    kept = list(tmp_path.glob("*-extension-*.json"))
    assert len(kept) == 1, "no results kept"
    result = json.loads(kept[0].read_text())
    assert result["figures"]["trim.trims_per_s"]["stock"]["value"] > 0
    assert result["figures"]["trim.trims_per_s"]["extension"]["value"] > 0
    # What it started, it stopped, and dropped its data but its logs.
    assert [p for p in ports if _bound(p)] == was_up
    if not was_up:
        for m in MODES:
            stack_dir = Path(instance_env(m)["STACK_DIR"])
            assert sorted(c.name for c in stack_dir.iterdir()) == ["logs"], (stack_dir, out[-1000:])
            assert (stack_dir / "logs" / "pulsar.out").stat().st_size > 0
