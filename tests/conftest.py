"""Shared fixtures. Integration tests get handles to the real local stack (deploy/local/stack.sh)."""

from __future__ import annotations

import os
import urllib.request
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from testkit.stack import REPO, STACK, Profile, Stack, admin_for, bookie_for, running, s3_client, stack_of
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin

__all__ = ["REPO", "STACK", "Stack"]

# The helpers the tests share live in modules that are not test modules; pytest rewrites their asserts as it does
# a test module's, so a failing one reports the values it compared. Registered here, before any of them is imported.
pytest.register_assert_rewrite(
    "tests.extension.helpers",
    "tests.integration.helpers",
    "tests.integration.offload_helpers",
    "tests.integration.prometheus_helpers",
    "tests.ops.helpers",
    "tests.unit.fakes",
)


# The shared stack: `make test` starts it (and .ci/run stops it); a bare `pytest` run starts it here the same way
# and leaves it up.
STANDALONE = Profile("standalone")


@pytest.fixture(scope="session")
def stack() -> Iterator[Stack]:
    with running(STANDALONE, stop=False) as addresses:
        yield stack_of(addresses)


@pytest.fixture
def unique() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="session")
def test_namespace(stack: Stack) -> Iterator[str]:
    """A namespace with infinite retention, so the broker never trims a test's ledgers on its own."""
    import json

    ns = f"public/ldw-test-{os.getpid()}"

    def call(method: str, path: str, body: object | None = None) -> None:
        req = urllib.request.Request(
            f"{stack.admin_url}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            urllib.request.urlopen(req, timeout=30).close()
        except urllib.error.HTTPError as e:
            if e.code != 409:
                raise

    call("PUT", f"/admin/v2/namespaces/{ns}")
    call("POST", f"/admin/v2/namespaces/{ns}/retention", {"retentionTimeInMinutes": -1, "retentionSizeInMB": -1})
    yield ns


@pytest.fixture
async def admin(stack: Stack) -> AsyncIterator[PulsarAdmin]:
    async with admin_for(stack) as a:
        yield a


@pytest.fixture
async def bookie(stack: Stack) -> AsyncIterator[BookieClient]:
    async with bookie_for(stack) as b:
        yield b


@pytest.fixture
def s3(stack: Stack) -> Any:
    return s3_client(stack)
