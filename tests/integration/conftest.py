"""Fixtures shared by the integration tests (the stack handles live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.integration.worker_harness import WorkerHarness


@pytest.fixture
def harnesses() -> Iterator[list[WorkerHarness]]:
    """Worker daemons a test started; each is stopped (SIGTERM) and its client closed afterwards."""
    made: list[WorkerHarness] = []
    yield made
    for h in made:
        h.close()


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One local[2] SparkSession for every nightly-job test (a JVM start costs tens of seconds)."""
    from worker.nightly.spark import session

    s = session("local[2]", "ldw-tests", **{"spark.sql.shuffle.partitions": "2"})
    yield s
    s.stop()
