"""Step 6, settle, its I/O: every message ends acknowledged, and nothing is acknowledged before its
successor (retry copy or dead letter) is durable. Every step is safe to repeat after a crash: a crash between
the successor's send and the ack only produces a duplicate, and deletion is idempotent. Which action a
message gets is decided apart, purely (``worker.core.settle_choice``).

A message whose dead letter cannot be published whole is dead-lettered bounded
(``worker.core.bounded_payload``) rather than handed back to be redelivered forever.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any, Protocol

from worker.core.bounded_payload import bounded_properties, summarize
from worker.daemon.envelope import Envelope
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
    async def send(
        self, content: Any, properties: dict[str, str] | None = ..., *, deliver_after: timedelta | None = ...
    ) -> Any: ...


class DeadLetterRefused(Exception):
    """The DLQ took neither the dead letter nor its bounded copy: nothing was acknowledged."""


def successor_properties(env: Envelope, *, reason: str, error: str) -> dict[str, str]:
    """The properties of ``env``'s retry or dead-letter copy: its own, with where it first came from (kept
    from an earlier copy), when the first copy was published, this attempt's count, the reason and the
    error."""
    props = dict(env.properties)
    props.setdefault(m.REAL_TOPIC, env.topic)
    props.setdefault(m.ORIGIN_MESSAGE_ID, env.message_id)
    props[m.FIRST_SEEN_MS] = str(env.first_seen_ms)
    props[m.RECONSUMETIMES] = str(env.attempt)
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
        max_payload_bytes: int = 65_536,
    ) -> None:
        self.consumer = consumer
        self.retry_producer = retry_producer
        self.dlq_producer = dlq_producer
        self.metrics = metrics
        self.max_payload_bytes = max_payload_bytes

    async def ack(self, env: Envelope) -> None:
        await self.consumer.acknowledge(env.message)
        self.metrics.acked.inc()

    async def ack_many(self, envs: list[Envelope]) -> list[BaseException | None]:
        """Acknowledge final messages together: in order, None for each acknowledged, else its failure."""
        failures = await self.consumer.acknowledge_many([env.message for env in envs])
        self.metrics.acked.inc(failures.count(None))
        return failures

    async def retry(self, env: Envelope, *, reason: str, error: str, delay_s: float) -> None:
        """Re-publish on the retry topic, delivered after ``delay_s``; then acknowledge."""
        props = successor_properties(env, reason=reason, error=error)
        await self.retry_producer.send(env.data, props, deliver_after=timedelta(seconds=delay_s))
        self.metrics.retried.inc()
        await self.ack(env)

    async def dead_letter(self, env: Envelope, *, reason: str, error: str) -> None:
        """Publish to the DLQ, then ack. A payload over ``max_payload_bytes`` goes as a bounded copy; so does
        any message the DLQ refuses whole (too big with its properties, a property it cannot take).
        Raises :class:`DeadLetterRefused`, nothing acknowledged, when the DLQ refuses the bounded copy too."""
        props = successor_properties(env, reason=reason, error=error)
        if len(env.data) <= self.max_payload_bytes:
            try:
                await self.dlq_producer.send(env.data, props)
            except Exception as e:
                log.warning(
                    "dead letter refused whole; publishing a bounded copy",
                    message_id=env.message_id,
                    error=f"{type(e).__name__}: {e}"[:LAST_ERROR_CHARS],
                )
                await self._send_bounded(env.data, props)
        else:
            await self._send_bounded(env.data, props)
        self.metrics.dlq.labels(reason=reason).inc()
        await self.ack(env)

    async def _send_bounded(self, data: bytes, props: Mapping[str, str]) -> None:
        payload, bounded = bounded_copy(data, props, max_payload_bytes=self.max_payload_bytes)
        try:
            await self.dlq_producer.send(payload, bounded)
        except Exception as e:
            raise DeadLetterRefused(f"the DLQ refused the bounded copy too: {type(e).__name__}: {e}") from e
