"""One aiohttp session per backend, timeouts everywhere, and the error type the pipeline reasons about."""

from __future__ import annotations

import ssl
from typing import TYPE_CHECKING

import aiohttp

if TYPE_CHECKING:
    pass


class PlainHttpRefused(aiohttp.ClientError):
    """A session for an https endpoint was asked to send a request over plain http."""


def _https_only() -> aiohttp.TraceConfig:
    """Refuse any request, or redirect, to an http:// URL: with an https admin URL the token must never
    travel in clear text, whatever a lookup answer or a broker's Location says."""

    async def start(_: object, __: object, params: aiohttp.TraceRequestStartParams) -> None:
        if params.url.scheme != "https":
            raise PlainHttpRefused(f"refused to send a request over plain http ({params.url.with_query(None)})")

    async def redirect(_: object, __: object, params: aiohttp.TraceRequestRedirectParams) -> None:
        location = params.response.headers.get("Location", "")
        if not location.startswith("https://"):
            params.response.release()
            raise PlainHttpRefused(f"refused a redirect from https to {location or 'nowhere'}")

    tc = aiohttp.TraceConfig()
    tc.on_request_start.append(start)
    tc.on_request_redirect.append(redirect)
    return tc


def new_session(
    timeout_s: float,
    *,
    limit: int = 32,
    ca_file: str | None = None,
    check_hostname: bool = True,
    https_only: bool = False,
) -> aiohttp.ClientSession:
    # Redirects are never followed automatically: a 307 from a broker means "not the owner", which must
    # invalidate our ownership cache and bump the snapshot epoch, not be silently chased.
    tls: ssl.SSLContext | bool = True
    if ca_file or not check_hostname:
        tls = ssl.create_default_context(cafile=ca_file)
        # Off only on explicit request (pulsar.tls_insecure_skip_hostname_verification): unsafe.
        tls.check_hostname = check_hostname
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout_s, connect=min(timeout_s, 5.0)),
        connector=aiohttp.TCPConnector(limit=limit, ssl=tls),
        raise_for_status=False,
        trace_configs=[_https_only()] if https_only else None,
    )
