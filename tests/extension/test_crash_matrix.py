"""The crash matrix's short form, in `make test`: the broker killed with SIGKILL while three drop paths run, with
the extension and in defer mode; every ledger a drop took from the metadata is on the queue, and none is left after
the worker drains it. `make leak-demo` is the full matrix (every path, several kill points, stock brokers too).

It runs `tools/leak_demo.py` as an operator does, on that tool's own stack instance (``LDW_DEMO_<VAR>``), and reads
the rows it writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.stack import REPO

pytestmark = pytest.mark.integration

PATHS = ("trim", "unsubscribe", "topic-deletion")


def test_every_dropped_ledger_is_queued_and_none_is_left_after_the_drain(tmp_path: Path) -> None:
    out = tmp_path / "matrix.json"
    cmd = [
        sys.executable,
        "-m",
        "tools.leak_demo",
        "--modes",
        "extension,defer",
        "--delays-ms",
        "500",
        "--topics",
        "3",
        "--paths",
        ",".join(PATHS),
        "--json-out",
        str(out),
    ]
    r = subprocess.run(cmd, cwd=REPO, env=os.environ.copy(), capture_output=True, text=True, timeout=1500)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    rows = json.loads(out.read_text())["rows"]
    assert {(row["mode"], row["path"]) for row in rows} == {(m, p) for m in ("extension", "defer") for p in PATHS}
    for row in rows:
        where = f"{row['mode']} {row['path']}"
        assert row["dropped_on_queue"] == row["dropped_before_worker"], f"{where}: an orphan was not queued: {row}"
        assert row["dropped_after_drain"] == 0, f"{where}: orphans left after the drain: {row}"
    # Defer mode leaves the broker's deletes to the worker: what its trims dropped is still there to be deleted.
    deferred = [row for row in rows if row["mode"] == "defer" and row["path"] == "trim"]
    assert deferred[0]["dropped_before_worker"] > 0, deferred
    # The table an operator reads is printed.
    assert "before the worker / of them on the queue / after the drain" in r.stdout
