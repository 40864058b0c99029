"""One aiohttp session per backend, timeouts everywhere, and the error type the pipeline reasons about."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    from worker.settings import PulsarSettings


class BackendError(Exception):
    """A backend (admin API, bookie, S3, ZooKeeper) failed in a way that may pass: retry later."""

    def __init__(self, backend: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{backend}: {message}")
        self.backend = backend
        self.status = status


def new_session(timeout_s: float, *, limit: int = 32, ca_file: str | None = None) -> aiohttp.ClientSession:
    # Redirects are never followed automatically: a 307 from a broker means "not the owner", which must
    # invalidate our ownership cache and bump the snapshot epoch, not be silently chased.
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout_s, connect=min(timeout_s, 5.0)),
        connector=aiohttp.TCPConnector(
            limit=limit, ssl=ssl.create_default_context(cafile=ca_file) if ca_file else True
        ),
        raise_for_status=False,
    )


def admin_session(p: PulsarSettings) -> aiohttp.ClientSession:
    """The session for a Pulsar admin API: its timeout, and its CA bundle when the endpoint is https."""
    ca = p.tls_trust_certs_file
    return new_session(p.request_timeout_s, ca_file=str(ca) if ca else None)
