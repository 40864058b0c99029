"""Fixtures shared by the integration tests (the stack handles live in tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.integration.worker_harness import WorkerHarness


@pytest.fixture
def harnesses() -> Iterator[list[WorkerHarness]]:
    """Worker daemons a test started; each is stopped (SIGTERM) and its client closed afterwards."""
    made: list[WorkerHarness] = []
    yield made
    for h in made:
        h.close()
