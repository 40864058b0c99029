"""The Pulsar binary-protocol client, built one way for the daemon, phase 1 and the operator commands.

Only pulsar-client's public API: its blocking ``pulsar.Client``, whose producers answer ``send_async`` on the
client's threads (handed to the event loop in bursts, :class:`~worker.backends.loop_handoff.LoopHandoff`), and
whose consumers the daemon drives from a thread per batch (:mod:`worker.broker.batch_consumer`). Blocking
calls that wait on the network (create, flush, close) run in a thread.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pulsar
from pulsar.schema import AvroSchema

from worker.backends.loop_handoff import LoopHandoff
from worker.formats.message import AVRO_SCHEMA, PendingDeleteLedgerInfo, decode, encode
from worker.settings import PulsarSettings


def _options(p: PulsarSettings) -> dict[str, Any]:
    return {
        "authentication": pulsar.AuthenticationToken(p.auth_token) if p.auth_token else None,
        **({"tls_trust_certs_file_path": str(p.tls_trust_certs_file)} if p.tls_trust_certs_file else {}),
        # The client's default checks the chain only: any certificate a trusted CA signed, for any host,
        # would be accepted, and the token handed to whoever holds one.
        "tls_validate_hostname": not p.tls_insecure_skip_hostname_verification,
        "tls_allow_insecure_connection": False,
        "operation_timeout_seconds": int(max(1, p.request_timeout_s)),
        # The C++ client logs every (re)connection at INFO; our own logs say what matters.
        "logger": pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn),
    }


def blocking_client(p: PulsarSettings) -> pulsar.Client:
    return pulsar.Client(p.service_url, **_options(p))


async def close_client(client: pulsar.Client) -> None:
    """Close ``client``; returns once its threads have stopped, so that the process may exit right after."""
    await asyncio.to_thread(client.close)


class CallFailed(pulsar.PulsarException):  # type: ignore[misc]
    """A call pulsar-client answered with a result other than ``Ok`` (``result``)."""

    def __init__(self, result: pulsar.Result, what: str) -> None:
        super().__init__(f"{what}: {result}")
        self.result = result


class Producer:
    """A producer of ``client`` awaited from asyncio: ``send`` completes once the broker has the message."""

    def __init__(self, producer: pulsar.Producer) -> None:
        self.producer = producer
        self._handoff: LoopHandoff | None = None

    @classmethod
    async def create(cls, client: pulsar.Client, topic: str, **options: Any) -> Producer:
        return cls(await asyncio.to_thread(client.create_producer, topic, **options))

    def _loop_handoff(self) -> LoopHandoff:
        loop = asyncio.get_running_loop()
        if self._handoff is None or self._handoff.loop is not loop:
            self._handoff = LoopHandoff(loop)
        return self._handoff

    async def send(
        self, content: Any, properties: dict[str, str] | None = None, *, deliver_after: timedelta | None = None
    ) -> str:
        """Publish ``content``; returns the message id, as text, once the broker has it."""
        handoff = self._loop_handoff()
        fut: asyncio.Future[str] = handoff.loop.create_future()

        def answered(answer: tuple[pulsar.Result, Any]) -> None:  # on the loop
            result, msg_id = answer
            if fut.done():
                return
            if result == pulsar.Result.Ok:
                fut.set_result(str(msg_id))
            else:
                fut.set_exception(CallFailed(result, f"send to {self.producer.topic()}"))

        self.producer.send_async(
            content,
            lambda result, msg_id: handoff.call(answered, (result, msg_id)),
            properties=properties,
            deliver_after=deliver_after,
        )
        return await fut

    async def flush(self) -> None:
        await asyncio.to_thread(self.producer.flush)

    async def close(self) -> None:
        await asyncio.to_thread(self.producer.close)


class PendingDeleteSchema(AvroSchema):  # type: ignore[misc]
    """Registers the Avro schema on the topic; values are :class:`PendingDeleteLedgerInfo`."""

    def __init__(self) -> None:
        super().__init__(None, schema_definition=AVRO_SCHEMA)

    def encode(self, obj: PendingDeleteLedgerInfo) -> bytes:
        if not isinstance(obj, PendingDeleteLedgerInfo):
            raise TypeError(f"expected a PendingDeleteLedgerInfo, got {type(obj).__name__}")
        return encode(obj)

    def decode(self, data: bytes) -> PendingDeleteLedgerInfo:
        return decode(data)

    def __str__(self) -> str:
        return "PendingDeleteSchema"
