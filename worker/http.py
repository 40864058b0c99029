"""One aiohttp session per backend, timeouts everywhere, and the error type the pipeline reasons about."""

from __future__ import annotations

import aiohttp


class BackendError(Exception):
    """A backend (admin API, bookie, S3, ZooKeeper) failed in a way that may pass: retry later."""

    def __init__(self, backend: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{backend}: {message}")
        self.backend = backend
        self.status = status


def new_session(timeout_s: float, *, limit: int = 32) -> aiohttp.ClientSession:
    # Redirects are never followed automatically: a 307 from a broker means "not the owner", which must
    # invalidate our ownership cache and bump the snapshot epoch, not be silently chased.
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout_s, connect=min(timeout_s, 5.0)),
        connector=aiohttp.TCPConnector(limit=limit),
        raise_for_status=False,
    )
