"""What tests and benchmarks both need to stage real topics: producers, ledger lists, polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pulsar

from worker.testing.harness import quiet_logger

T = TypeVar("T")


def produce(service_url: str, topic: str, n: int, *, payload: bytes = b"x" * 100) -> None:
    """Send n messages one by one (batching off: one entry each, so the broker rolls a ledger per 5)."""
    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=quiet_logger())
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(payload + str(i).encode())
        producer.flush()
        producer.close()
    finally:
        client.close()


def ml_ledger_ids(internal_stats: dict[str, Any]) -> list[int]:
    return [int(ld["ledgerId"]) for ld in internal_stats["ledgers"]]


async def eventually(
    check: Callable[[], Awaitable[T]], *, timeout: float = 60.0, interval: float = 0.5, what: str = "condition"
) -> T:
    """Poll ``check`` until it returns a truthy value; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = await check()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last value: {last!r})")
