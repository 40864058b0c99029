"""Real BookKeeper ledgers for the benchmark, made by BookKeeper's own Java client in one JVM.

``bench/java/CreateLedgers.java`` is ``tests/integration/java/CreateLedger.java`` pipelined (64 ledgers in
flight): the same ledgers, a few times faster when thousands are needed.
"""

from __future__ import annotations

import subprocess

from testkit.stack import REPO, Stack, pulsar_home, pulsar_java

IN_FLIGHT = 64


class LedgerCreationFailed(RuntimeError):
    def __init__(self, message: str, made: list[int]) -> None:
        super().__init__(message)
        self.made = made  # the ledgers that were created anyway: the caller deletes them


def create(stack: Stack, count: int, custom: dict[str, str], *, entries: int = 3, timeout_s: float = 240) -> list[int]:
    home = pulsar_home()
    cmd = [
        pulsar_java(home),
        "-cp",
        f"{home}/lib/*",
        str(REPO / "bench" / "java" / "CreateLedgers.java"),
        stack.zookeeper_hosts,
        str(count),
        str(entries),
        str(IN_FLIGHT),
        *(f"{k}={v}" for k, v in custom.items()),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    ids = [int(line.split("=", 1)[1]) for line in out.stdout.splitlines() if line.startswith("LEDGER_ID=")]
    if out.returncode == 0 and len(ids) == count:
        return ids
    raise LedgerCreationFailed(
        f"CreateLedgers made {len(ids)}/{count} (exit {out.returncode}): {out.stderr[-2000:]}", ids
    )
