"""Before the daemon takes a message: can it talk to Pulsar with what it was given?

A wrong or missing token, a role without the permissions the worker needs, or an admin endpoint whose
certificate is not trusted would otherwise surface as an endless stream of retried messages. They are
refused at start instead, with the endpoint, the setting to fix and, for a 403, what was asked.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

import aiohttp
import pulsar
import pulsar.asyncio as pulsar_asyncio

from worker.http import BackendError
from worker.pulsar_admin import PulsarAdmin
from worker.settings import PulsarSettings
from worker.topic_name import TopicName


class StartupRefused(Exception):
    """The worker cannot work with this configuration; the message says which endpoint and key."""


def _tls_hint(p: PulsarSettings) -> str:
    if p.tls_trust_certs_file:
        return f"the CA bundle pulsar.tls_trust_certs_file ({p.tls_trust_certs_file}) does not vouch for it"
    return "set pulsar.tls_trust_certs_file to the CA bundle that signed the broker's certificate"


async def check_admin(admin: PulsarAdmin, p: PulsarSettings, topic: TopicName) -> None:
    """One authenticated call every role of the worker needs (the pending topic's partition count)."""
    url = str(p.admin_url).rstrip("/")
    try:
        await admin.partitions(topic)
    except BackendError as e:
        cause = e.__cause__
        if isinstance(cause, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError):
            raise StartupRefused(
                f"pulsar.admin_url {url}: TLS certificate not trusted ({cause}); {_tls_hint(p)}"
            ) from e
        # Pulsar answers 401 to both: Jetty's "Authentication required" page when the credentials are
        # refused, and a JSON {"reason": "Unauthorized to ..."} when the role lacks a permission.
        denied = _authorization_reason(str(e))
        if e.status == 403 or (e.status == 401 and denied):
            raise StartupRefused(
                f"pulsar.admin_url {url}: the token's role may not look up {topic} ({e.status}: "
                f"{denied or 'forbidden'}); token from {p.token_source}. Grant it consume and produce on "
                f"{topic.namespace_name} (README: Authentication)"
            ) from e
        if e.status == 401:
            raise StartupRefused(
                f"pulsar.admin_url {url}: the broker refused the credentials (401 Unauthorized); "
                f"token from {p.token_source}"
            ) from e
        raise


def _authorization_reason(message: str) -> str | None:
    m = re.search(r'"reason"\s*:\s*"([^"]*)"', message)
    return m.group(1) if m else None


def _result(e: Exception) -> object:
    # pulsar.asyncio wraps every failure in PulsarException(result); the blocking client raises a class
    # per result. Both say the same thing.
    if isinstance(e, pulsar_asyncio.PulsarException):
        return e.error()
    if isinstance(e, pulsar.AuthenticationError):
        return pulsar.Result.AuthenticationError
    if isinstance(e, pulsar.AuthorizationError):
        return pulsar.Result.AuthorizationError
    return None


def binary_refusal(p: PulsarSettings, what: str, e: Exception) -> StartupRefused | None:
    """The StartupRefused for a binary-protocol error that no retry can fix, else None."""
    result = _result(e)
    if result == pulsar.Result.AuthenticationError:
        return StartupRefused(
            f"pulsar.service_url {p.service_url}: the broker refused the credentials ({what}: {e}); "
            f"token from {p.token_source}"
        )
    if result == pulsar.Result.AuthorizationError:
        return StartupRefused(
            f"pulsar.service_url {p.service_url}: the token's role is not authorized to {what} ({e}); "
            f"token from {p.token_source} (README: Authentication)"
        )
    return None


@contextlib.contextmanager
def refused_as(p: PulsarSettings, what: str) -> Iterator[None]:
    """Turn an authentication or authorization failure of ``what`` into StartupRefused."""
    try:
        yield
    except Exception as e:
        refused = binary_refusal(p, what, e)
        if refused is None:
            raise
        raise refused from e
