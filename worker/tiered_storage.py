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
from pathlib import Path
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from worker.http import BackendError
from worker.message import PendingDeleteLedgerInfo
from worker.metrics import Metrics
from worker.settings import OffloadSettings, S3Target
from worker.storage_copy import Missing, Refused, Stored, StoredObjects
from worker.verification import offload_keys, resolve_filesystem_path, resolve_s3_target


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

    async def inspect(self, info: PendingDeleteLedgerInfo) -> Stored:
        """What tiered storage holds of the announced offloaded copy. Only configured targets are ever
        asked; identity (the objects' ``ManagedLedgerName``) is judged by ``worker.verification``."""
        ctx = info.offload_context
        if ctx is None:
            return Refused("missing_offload_context")
        if ctx.driver_name.lower() == "filesystem":
            return await self._inspect_fs(info)
        target = resolve_s3_target(ctx, self.settings.s3_targets)
        if isinstance(target, str):
            return Refused(target)
        client = self._clients[_target_key(target)]
        present: list[str] = []
        metadata: list[dict[str, str]] = []
        for key in offload_keys(ctx, info.ledger_id):
            md = await self._head(client, target.bucket, key)
            if md is not None:
                present.append(key)
                metadata.append(md)
        if not present:
            return Missing()
        return StoredObjects("s3", (target, present), tuple(metadata))

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

    async def delete(self, state: StoredObjects) -> None:
        if state.kind == "filesystem":
            path: Path = state.locator
            try:
                await asyncio.to_thread(shutil.rmtree, path, ignore_errors=False)
            except FileNotFoundError:
                return
            except OSError as e:
                raise BackendError("filesystem", f"remove {path}: {e}") from e
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

    async def _inspect_fs(self, info: PendingDeleteLedgerInfo) -> Stored:
        base = self.settings.filesystem_base_path
        ctx = info.offload_context
        if base is None or ctx is None:
            return Refused("filesystem_offload_not_configured")
        path = resolve_filesystem_path(base, info.topic.managed_ledger_name, info.ledger_id, ctx)
        if isinstance(path, str):
            return Refused(path)
        try:
            exists = await asyncio.to_thread(path.exists)
        except OSError as e:
            raise BackendError("filesystem", f"stat {path}: {e}") from e
        # The path is built from the announced topic's managed-ledger name: the location is the proof.
        return StoredObjects("filesystem", path, None) if exists else Missing()
