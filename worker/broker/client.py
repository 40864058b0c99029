"""The Pulsar binary-protocol client, built one way for the daemon, phase 1 and the operator commands."""

from __future__ import annotations

import asyncio
from typing import Any

import _pulsar
import pulsar
import pulsar.asyncio as pulsar_asyncio
from pulsar.schema import Schema

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


def async_client(p: PulsarSettings) -> pulsar_asyncio.Client:
    return pulsar_asyncio.Client(p.service_url, **_options(p))


def blocking_client(p: PulsarSettings) -> pulsar.Client:
    return pulsar.Client(p.service_url, **_options(p))


async def close_client(client: pulsar_asyncio.Client) -> None:
    """Close a ``pulsar.asyncio`` client so that the process may exit right after.

    ``pulsar.asyncio.Client.close()`` resolves from a C++ callback while the client's threads are still
    stopping; a process that exits at that moment aborts ("terminate called without an active
    exception", or a segfault), which short-lived processes under load do often. The blocking close of
    the underlying client returns only once they are done.
    """
    await asyncio.to_thread(client._client.close)


class PendingDeleteSchema(Schema):  # type: ignore[misc]
    """Registers the Avro schema on the topic; values are :class:`PendingDeleteLedgerInfo`."""

    def __init__(self) -> None:
        super().__init__(PendingDeleteLedgerInfo, _pulsar.SchemaType.AVRO, AVRO_SCHEMA, "AVRO")

    def encode(self, obj: PendingDeleteLedgerInfo) -> bytes:
        self._validate_object_type(obj)
        return encode(obj)

    def decode(self, data: bytes) -> PendingDeleteLedgerInfo:
        return decode(data)

    def __str__(self) -> str:
        return "PendingDeleteSchema"
