"""Step 6, settle: every message ends acknowledged, and nothing is acknowledged before its successor
(retry copy or dead letter) is durable. Every step is safe to repeat after a crash: a crash between the
successor's send and the ack only produces a duplicate, and deletion is idempotent.

A message's properties are untrusted input like its payload: every number read from them is clamped, and a
message whose dead letter cannot be published whole is dead-lettered bounded (``worker.core.bounded_payload``)
rather than handed back to be redelivered forever.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Protocol

import pulsar

from worker.core.bounded_payload import bounded_properties, summarize
from worker.core.message_properties import MAX_ATTEMPT_COUNT, attempts_so_far, first_seen_ms
from worker.formats import message as m
from worker.logs import get_logger
from worker.metrics import Metrics

log = get_logger()

# How many leading characters of an error a successor's ``last_error`` keeps.
LAST_ERROR_CHARS = 1000


class AsyncConsumer(Protocol):
    async def acknowledge(self, msg: Any) -> None: ...

    async def acknowledge_many(self, msgs: list[Any]) -> list[BaseException | None]: ...


class AsyncProducer(Protocol):
    async def send(self, content: Any, properties: dict[str, str] | None = ..., **kw: Any) -> Any: ...


class DeadLetterRefused(Exception):
    """The DLQ took neither the dead letter nor its bounded copy: nothing was acknowledged."""


def properties_of(msg: pulsar.Message) -> dict[str, str]:
    """The message's properties; none when they cannot be read (bytes that are not UTF-8 raise)."""
    try:
        return dict(msg.properties())
    except Exception:
        return {}


def attempts_of(msg: pulsar.Message) -> int:
    """Attempts before this delivery: the retry chain's count plus the broker's redeliveries of this very
    message (a worker that died or could not settle it). Every failure counts, so nothing loops forever."""
    try:
        redelivered = min(MAX_ATTEMPT_COUNT, max(0, int(msg.redelivery_count())))
    except (AttributeError, TypeError, ValueError, OverflowError):
        redelivered = 0
    return min(MAX_ATTEMPT_COUNT, attempts_so_far(properties_of(msg)) + redelivered)


def successor_properties(msg: pulsar.Message, *, reason: str, error: str, attempts: int, now_ms: int) -> dict[str, str]:
    props = properties_of(msg)
    try:
        publish_ms = int(msg.publish_timestamp() or 0)
    except (AttributeError, TypeError, ValueError):
        publish_ms = 0
    props.setdefault(m.REAL_TOPIC, msg.topic_name())
    props.setdefault(m.ORIGIN_MESSAGE_ID, str(msg.message_id()))
    props[m.FIRST_SEEN_MS] = str(first_seen_ms(props, publish_ms=publish_ms, now_ms=now_ms))
    props[m.RECONSUMETIMES] = str(min(MAX_ATTEMPT_COUNT, attempts))
    props[m.REASON] = reason
    props[m.LAST_ERROR] = error[:LAST_ERROR_CHARS]
    return props


def bounded_copy(data: bytes, props: Mapping[str, str], *, max_payload_bytes: int) -> tuple[bytes, dict[str, str]]:
    """What the DLQ gets when a message cannot be dead-lettered whole: the payload itself while it is within
    ``max_payload_bytes`` (a genuine message stays decidable by the nightly replay), else its first KiB; the
    properties bounded (the worker's own first); and the payload's size and SHA-256."""
    s = summarize(data)
    payload = data if s.size <= max_payload_bytes else s.head
    out, cut = bounded_properties(props, first=m.WORKER_PROPERTIES)
    out[m.PAYLOAD_SIZE] = str(s.size)
    out[m.PAYLOAD_SHA256] = s.sha256
    out[m.PAYLOAD_TRUNCATED] = "true" if len(payload) < s.size else "false"
    out[m.PROPERTIES_TRUNCATED] = str(cut)
    return payload, out


class Settler:
    def __init__(
        self,
        consumer: AsyncConsumer,
        retry_producer: AsyncProducer,
        dlq_producer: AsyncProducer,
        metrics: Metrics,
        *,
        max_attempts: int,
        max_payload_bytes: int = 65_536,
    ) -> None:
        self.consumer = consumer
        self.retry_producer = retry_producer
        self.dlq_producer = dlq_producer
        self.metrics = metrics
        self.max_attempts = max_attempts
        self.max_payload_bytes = max_payload_bytes

    async def ack(self, msg: pulsar.Message) -> None:
        await self.consumer.acknowledge(msg)
        self.metrics.acked.inc()

    async def ack_many(self, msgs: list[pulsar.Message]) -> list[BaseException | None]:
        """Acknowledge final messages together: in order, None for each acknowledged, else its failure."""
        failures = await self.consumer.acknowledge_many(msgs)
        self.metrics.acked.inc(failures.count(None))
        return failures

    async def retry(
        self,
        msg: pulsar.Message,
        *,
        reason: str,
        error: str,
        delay_after: Callable[[int], float],
        release_when_exhausted: bool = False,
    ) -> str:
        """Re-publish with the delay ``delay_after(attempt)``, then ack; or, once attempts are exhausted,
        dead-letter (or only acknowledge, with ``release_when_exhausted``: ``worker.core.broker_marks``).
        Exhaustion is decided first: nothing about the delay may keep a message from its DLQ.
        Returns ``"retry"``, ``"dlq"`` or ``"released"``."""
        attempts = attempts_of(msg) + 1
        if attempts >= self.max_attempts and release_when_exhausted:
            await self.ack(msg)
            return "released"
        if attempts >= self.max_attempts:
            await self.dead_letter(msg, reason=reason, error=f"attempts exhausted ({attempts}): {error}")
            return "dlq"
        delay_s = delay_after(attempts)
        props = successor_properties(msg, reason=reason, error=error, attempts=attempts, now_ms=_now_ms())
        await self.retry_producer.send(msg.data(), props, deliver_after=timedelta(seconds=delay_s))
        self.metrics.retried.inc()
        await self.ack(msg)
        return "retry"

    async def dead_letter(self, msg: pulsar.Message, *, reason: str, error: str) -> None:
        """Publish to the DLQ, then ack. A payload over ``max_payload_bytes`` goes as a bounded copy; so does
        any message the DLQ refuses whole (too big with its properties, a property it cannot take).
        Raises :class:`DeadLetterRefused`, nothing acknowledged, when the DLQ refuses the bounded copy too."""
        attempts = attempts_of(msg) + 1
        props = successor_properties(msg, reason=reason, error=error, attempts=attempts, now_ms=_now_ms())
        data = msg.data()
        if len(data) <= self.max_payload_bytes:
            try:
                await self.dlq_producer.send(data, props)
            except Exception as e:
                log.warning(
                    "dead letter refused whole; publishing a bounded copy",
                    message_id=str(msg.message_id()),
                    error=f"{type(e).__name__}: {e}"[:LAST_ERROR_CHARS],
                )
                await self._send_bounded(data, props)
        else:
            await self._send_bounded(data, props)
        self.metrics.dlq.labels(reason=reason).inc()
        await self.ack(msg)

    async def _send_bounded(self, data: bytes, props: Mapping[str, str]) -> None:
        payload, bounded = bounded_copy(data, props, max_payload_bytes=self.max_payload_bytes)
        try:
            await self.dlq_producer.send(payload, bounded)
        except Exception as e:
            raise DeadLetterRefused(f"the DLQ refused the bounded copy too: {type(e).__name__}: {e}") from e


def _now_ms() -> int:
    return int(time.time() * 1000)
