"""Step 6, settle: every message ends acknowledged, and nothing is acknowledged before its successor
(retry copy or dead letter) is durable. Every step is safe to repeat after a crash: a crash between the
successor's send and the ack only produces a duplicate, and deletion is idempotent.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol

import pulsar

from worker import message as m
from worker.metrics import Metrics


class AsyncConsumer(Protocol):
    async def acknowledge(self, msg: Any) -> None: ...


class AsyncProducer(Protocol):
    async def send(self, content: Any, properties: dict[str, str] | None = ..., **kw: Any) -> Any: ...


def attempts_so_far(properties: Mapping[str, str]) -> int:
    """How many attempts were made before this delivery (``RECONSUMETIMES``; garbage counts as 0)."""
    try:
        return max(0, int(properties.get(m.RECONSUMETIMES, "0")))
    except ValueError:
        return 0


def attempts_of(msg: pulsar.Message) -> int:
    """Attempts before this delivery: the retry chain's count plus the broker's redeliveries of this very
    message (a worker that died or could not settle it). Every failure counts, so nothing loops forever."""
    try:
        redelivered = max(0, int(msg.redelivery_count()))
    except (AttributeError, TypeError, ValueError):
        redelivered = 0
    return attempts_so_far(msg.properties()) + redelivered


def successor_properties(msg: pulsar.Message, *, reason: str, error: str, attempts: int, now_ms: int) -> dict[str, str]:
    props = dict(msg.properties())
    props.setdefault(m.REAL_TOPIC, msg.topic_name())
    props.setdefault(m.ORIGIN_MESSAGE_ID, str(msg.message_id()))
    props.setdefault(m.FIRST_SEEN_MS, str(msg.publish_timestamp() or now_ms))
    props[m.RECONSUMETIMES] = str(attempts)
    props[m.REASON] = reason
    props[m.LAST_ERROR] = error[:1000]
    return props


class Settler:
    def __init__(
        self,
        consumer: AsyncConsumer,
        retry_producer: AsyncProducer,
        dlq_producer: AsyncProducer,
        metrics: Metrics,
        *,
        max_attempts: int,
    ) -> None:
        self.consumer = consumer
        self.retry_producer = retry_producer
        self.dlq_producer = dlq_producer
        self.metrics = metrics
        self.max_attempts = max_attempts

    async def ack(self, msg: pulsar.Message) -> None:
        await self.consumer.acknowledge(msg)
        self.metrics.acked.inc()

    async def retry(self, msg: pulsar.Message, *, reason: str, error: str, delay_s: float) -> str:
        """Re-publish with a delay, then ack; or dead-letter once attempts are exhausted.
        Returns ``"retry"`` or ``"dlq"``."""
        attempts = attempts_of(msg) + 1
        if attempts >= self.max_attempts:
            await self.dead_letter(msg, reason=reason, error=f"attempts exhausted ({attempts}): {error}")
            return "dlq"
        props = successor_properties(msg, reason=reason, error=error, attempts=attempts, now_ms=_now_ms())
        await self.retry_producer.send(msg.data(), props, deliver_after=timedelta(seconds=delay_s))
        self.metrics.retried.inc()
        await self.ack(msg)
        return "retry"

    async def dead_letter(self, msg: pulsar.Message, *, reason: str, error: str) -> None:
        attempts = attempts_of(msg) + 1
        props = successor_properties(msg, reason=reason, error=error, attempts=attempts, now_ms=_now_ms())
        await self.dlq_producer.send(msg.data(), props)
        self.metrics.dlq.labels(reason=reason).inc()
        await self.ack(msg)


def _now_ms() -> int:
    return int(time.time() * 1000)
