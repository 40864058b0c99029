"""Fixtures shared by the integration tests (the stack handles live in tests/conftest.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import pytest

from testkit.harness import WorkerHarness, free_port
from tests.conftest import Stack
from tests.integration.prometheus_helpers import binary, wait_http


@pytest.fixture
def harnesses() -> Iterator[list[WorkerHarness]]:
    """Worker daemons a test started; each is stopped (SIGTERM) and its client closed afterwards."""
    made: list[WorkerHarness] = []
    yield made
    for h in made:
        h.close()


class WorkerFactory(Protocol):
    def __call__(self, name: str | None = None, *, start: bool = True, **overrides: Any) -> WorkerHarness: ...


@pytest.fixture
def make_worker(stack: Stack, tmp_path: Path, unique: str, harnesses: list[WorkerHarness]) -> WorkerFactory:
    """A worker daemon on the test stack: ``make_worker(name, section={...}, ...)`` gives one configured with
    those overrides (``WorkerHarness``), started unless ``start=False``, and stopped after the test. ``name``
    names its queue topics (default: the test's unique id and a count)."""

    def make(name: str | None = None, *, start: bool = True, **overrides: Any) -> WorkerHarness:
        h = WorkerHarness(stack, tmp_path, name or f"w-{unique}-{len(harnesses)}", **overrides)
        harnesses.append(h)
        return h.start() if start else h

    return make


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for every nightly-job test (a JVM start costs tens of seconds)."""
    from worker.nightly.spark import session

    s = session("local[2]", "ldw-tests", **{"spark.sql.shuffle.partitions": "2"})
    yield s
    s.stop()


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[str]:
    """A real Pushgateway (Debian's) on a free loopback port: its ``host:port``."""
    port = free_port()
    log = open(tmp_path / "pushgateway.log", "wb")
    proc = subprocess.Popen(
        [binary("prometheus-pushgateway"), f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=log
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/-/ready")
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
