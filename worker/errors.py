"""The errors every layer reasons about: a backend that failed in a way that may pass, and a start the
worker refuses (bad configuration or an endpoint that is not what the configuration says)."""

from __future__ import annotations


class BackendError(Exception):
    """A backend (admin API, bookie, S3, ZooKeeper) failed in a way that may pass: retry later."""

    def __init__(self, backend: str, message: str, status: int | None = None) -> None:
        super().__init__(f"{backend}: {message}")
        self.backend = backend
        self.status = status


class StartupRefused(Exception):
    """The worker cannot work with this configuration; the message says which endpoint and key."""
