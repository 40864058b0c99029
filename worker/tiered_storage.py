"""Offloaded copies of ledgers: identity checks and deletion in tiered storage.

S3 (Pulsar's jcloud offloader, drivers ``aws-s3``/``S3``/``aws-s3-compatible``): a ledger offloaded
under uuid U is two objects, ``U-ledger-ID`` (data) and ``U-ledger-ID-index``, whose user metadata
carries ``ManagedLedgerName``. Filesystem driver: one directory ``{base}/{ML name}/{ID}-{U}``.

Connections only ever go to configured targets (see ``worker.verification.resolve_s3_target``).
"""

from __future__ import annotations

import asyncio
import shutil
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from worker.http import BackendError
from worker.message import PendingDeleteLedgerInfo
from worker.metrics import Metrics
from worker.settings import OffloadSettings, S3Target
from worker.verification import (
    Verification,
    offload_keys,
    resolve_filesystem_path,
    resolve_s3_target,
    verify_offload_object_metadata,
)


@dataclass(frozen=True, slots=True)
class Present:
    """The offloaded copy exists and proved its identity; ``locator`` says how to delete it."""

    kind: str  # "s3" | "filesystem"
    locator: Any


@dataclass(frozen=True, slots=True)
class Gone:
    pass


OffloadState = Present | Gone | Verification  # a Verification here is always a rejection


def _target_key(t: S3Target) -> tuple[str, str, str]:
    return (t.bucket, t.region, str(t.endpoint or ""))


class TieredStorage:
    def __init__(self, settings: OffloadSettings, metrics: Metrics) -> None:
        self.settings = settings
        self.metrics = metrics
        self._stack = AsyncExitStack()
        self._clients: dict[tuple[str, str, str], Any] = {}

    async def __aenter__(self) -> TieredStorage:
        session = get_session()
        cfg = AioConfig(
            connect_timeout=min(10.0, self.settings.request_timeout_s),
            read_timeout=self.settings.request_timeout_s,
            retries={"max_attempts": 2, "mode": "standard"},
        )
        for t in self.settings.s3_targets:
            client = await self._stack.enter_async_context(
                session.create_client(
                    "s3",
                    region_name=t.region,
                    endpoint_url=str(t.endpoint) if t.endpoint else None,
                    aws_access_key_id=t.access_key_id,
                    aws_secret_access_key=t.secret_access_key,
                    config=cfg,
                )
            )
            self._clients[_target_key(t)] = client
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def _count(self, op: str, outcome: str) -> None:
        self.metrics.storage_requests.labels(backend="s3", operation=op, outcome=outcome).inc()

    async def inspect(self, info: PendingDeleteLedgerInfo) -> OffloadState:
        ctx = info.offload_context
        if ctx is None:
            return Verification.reject("missing_offload_context")
        if ctx.driver_name.lower() == "filesystem":
            return await self._inspect_fs(info)
        target = resolve_s3_target(ctx, self.settings.s3_targets)
        if isinstance(target, str):
            return Verification.reject(target)
        client = self._clients[_target_key(target)]
        keys = offload_keys(ctx, info.ledger_id)
        present: list[str] = []
        for key in keys:
            md = await self._head(client, target.bucket, key)
            if md is None:
                continue
            v = verify_offload_object_metadata(info, md)
            if v.verdict != "match":
                return v
            present.append(key)
        if not present:
            return Gone()
        return Present("s3", (target, present))

    async def _head(self, client: Any, bucket: str, key: str) -> dict[str, str] | None:
        try:
            r = await client.head_object(Bucket=bucket, Key=key)
        except ClientError as e:
            code = str(e.response.get("Error", {}).get("Code", ""))
            if code in ("404", "NoSuchKey", "NotFound"):
                self._count("head", "not_found")
                return None
            self._count("head", "error")
            raise BackendError("s3", f"HEAD {bucket}/{key}: {code} {e}") from e
        except (TimeoutError, BotoCoreError, OSError) as e:
            self._count("head", "error")
            raise BackendError("s3", f"HEAD {bucket}/{key}: {type(e).__name__}: {e}") from e
        self._count("head", "ok")
        return dict(r.get("Metadata") or {})

    async def delete(self, state: Present) -> None:
        if state.kind == "filesystem":
            path: Path = state.locator
            await asyncio.to_thread(shutil.rmtree, path, ignore_errors=False)
            return
        target, keys = state.locator
        client = self._clients[_target_key(target)]
        try:
            r = await client.delete_objects(
                Bucket=target.bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
            )
        except (TimeoutError, ClientError, BotoCoreError, OSError) as e:
            self._count("delete", "error")
            raise BackendError("s3", f"DeleteObjects {target.bucket} {keys}: {type(e).__name__}: {e}") from e
        errors = [e for e in r.get("Errors", []) if e.get("Code") not in ("NoSuchKey", "404")]
        if errors:
            self._count("delete", "error")
            raise BackendError("s3", f"DeleteObjects {target.bucket}: {errors}")
        self._count("delete", "ok")

    async def _inspect_fs(self, info: PendingDeleteLedgerInfo) -> OffloadState:
        base = self.settings.filesystem_base_path
        ctx = info.offload_context
        if base is None or ctx is None:
            return Verification.reject("filesystem_offload_not_configured")
        path = resolve_filesystem_path(base, info.topic.managed_ledger_name, info.ledger_id, ctx)
        if isinstance(path, str):
            return Verification.reject(path)
        exists = await asyncio.to_thread(path.exists)
        return Present("filesystem", path) if exists else Gone()
