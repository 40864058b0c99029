"""The auth profile of the local stack (deploy/local/stack.sh, PROFILE=auth): Pulsar standalone with token
authentication and authorization on and TLS on the admin endpoint and on the binary protocol, beside the
standalone stack.

Every test in this directory is marked ``auth`` (and ``integration``). The package-scoped fixture starts
the profile if it is not up (~20 s; tokens and the certificate are made at its first start) and stops it
after the last test here unless it was already up; ``LDW_AUTH=0`` skips these tests, saying so.
"""

from __future__ import annotations

import json
import os
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from testkit.stack import Profile, Stack, mark_directory, running, stack_of


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_directory(items, os.path.dirname(__file__), pytest.mark.auth, pytest.mark.integration)


AUTH = Profile("auth", off="LDW_AUTH")


@dataclass(frozen=True, kw_only=True)
class AuthStack(Stack):
    admin_url_plain: str
    service_url_tls: str
    token_dir: Path
    ca: Path

    def token_file(self, role: str) -> Path:
        return self.token_dir / f"{role}.token"

    def token(self, role: str) -> str:
        return self.token_file(role).read_text().strip()

    def rest(
        self, method: str, path: str, body: Any = None, *, role: str = "admin", ok: tuple[int, ...] = (200, 204)
    ) -> Any:
        """One admin REST call over TLS as ``role``."""
        req = urllib.request.Request(
            f"{self.admin_url}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self.token(role)}"},
        )
        ctx = ssl.create_default_context(cafile=str(self.ca))
        try:
            with urllib.request.urlopen(req, timeout=60, context=ctx) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            status, text = e.code, e.read().decode(errors="replace")
        if status not in ok:
            raise AssertionError(f"{method} {path} as {role} answered {status}: {text[:500]}")
        return json.loads(text) if text.strip().startswith(("{", "[")) else text

    def grant(self, namespace: str, role: str, actions: list[str]) -> None:
        self.rest("POST", f"/admin/v2/namespaces/{namespace}/permissions/{role}", actions)


@pytest.fixture(scope="package")
def auth_stack() -> Iterator[AuthStack]:
    with running(AUTH) as env:
        yield AuthStack(
            **asdict(stack_of(env)),
            admin_url_plain=env["PULSAR_ADMIN_URL_PLAIN"],
            service_url_tls=env["PULSAR_SERVICE_URL_TLS"],
            token_dir=Path(env["PULSAR_TOKEN_DIR"]),
            ca=Path(env["PULSAR_TLS_CA"]),
        )
