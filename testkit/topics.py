"""What tests and benchmarks both need to stage real topics: producers, ledger lists, polling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pulsar

from testkit.harness import quiet_logger

T = TypeVar("T")


def client_for(service_url: str, token: str | None = None) -> pulsar.Client:
    """A blocking client for staging and checking topics (quiet, 30 s operations, optional token)."""
    return pulsar.Client(
        service_url,
        authentication=pulsar.AuthenticationToken(token) if token else None,
        operation_timeout_seconds=30,
        logger=quiet_logger(),
    )


def produce(service_url: str, topic: str, n: int, *, payload: bytes = b"x" * 100, token: str | None = None) -> None:
    """Send n messages one by one (batching off: one entry each, so the broker rolls a ledger per 5)."""
    client = client_for(service_url, token)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(n):
            producer.send(payload + str(i).encode())
        producer.flush()
        producer.close()
    finally:
        client.close()


def count_from_earliest(service_url: str, topic: str, timeout_ms: int = 5000, *, token: str | None = None) -> int:
    """How many messages a reader gets from the earliest position: proof the ledgers are readable."""
    client = client_for(service_url, token)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        n = 0
        while reader.has_message_available():
            reader.read_next(timeout_millis=timeout_ms)
            n += 1
        reader.close()
        return n
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
