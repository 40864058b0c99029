"""Offloaded copies of ledgers: identity checks and deletion in tiered storage.

S3 (Pulsar's jcloud offloader, drivers ``aws-s3``/``S3``/``aws-s3-compatible``): a ledger offloaded
under uuid U is two objects, ``U-ledger-ID`` (data) and ``U-ledger-ID-index``, whose user metadata
carries ``ManagedLedgerName``. Filesystem driver: one directory ``{base}/{ML name}/{ID}-{U}``.

Connections only ever go to configured targets (see ``worker.core.verification.resolve_s3_target``).

"Not found" is an answer only from storage that is there. S3 answers a HEAD on an object of a missing
bucket with a bare 404, the same as for a missing object (a HEAD has no body to say ``NoSuchBucket``), and
a gone or unmounted filesystem base path holds nothing either: a misnamed bucket, a misrouted endpoint or
an unmounted volume would settle every offload deletion as already gone. So every configured target is
checked when this opens (:meth:`TieredStorage.check_targets`: the daemon refuses to start on one that is
not there, and the DLQ replay and the audit, through :func:`check_offload_targets` on their driver, before
they read anything), and a not-found is
settled only after the bucket answers HeadBucket again, or the base path is still the directory, on the
same device, it was at start; otherwise the decision is transient.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import stat
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session
from botocore.exceptions import BotoCoreError, ClientError

from worker.backends.group_commit import Commit, GroupCommits
from worker.core.stored import Missing, Refused, Stored, StoredObjects
from worker.core.verification import offload_keys, resolve_filesystem_path, resolve_s3_target
from worker.errors import BackendError, StartupRefused
from worker.formats.message import PendingDeleteLedgerInfo
from worker.metrics import Metrics
from worker.settings import OffloadSettings, S3Target


def _target_key(t: S3Target) -> tuple[str, str, str]:
    return (t.bucket, t.region, str(t.endpoint or ""))


def _describe(t: S3Target) -> str:
    where = str(t.endpoint).rstrip("/") if t.endpoint else "AWS"
    return f"bucket {t.bucket} at {where} (region {t.region})"


def _error_code(e: ClientError) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


_NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound", "NoSuchBucket"})


# Keys per DeleteObjects request (S3's limit); an offloaded copy is two objects (data and index).
DELETE_OBJECTS_MAX = 1000


class TieredStorage:
    def __init__(self, settings: OffloadSettings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self._stack = AsyncExitStack()
        self._clients: dict[tuple[str, str, str], Any] = {}
        # The base path's device at start: an unmount leaves the (empty) mount point, on another device.
        self._fs_device: int | None = None
        self._deletes: GroupCommits[tuple[S3Target, tuple[str, ...]], None] = GroupCommits(
            self._delete_objects, max_batch=DELETE_OBJECTS_MAX // 2
        )

    async def __aenter__(self) -> TieredStorage:
        session = get_session()
        cfg = AioConfig(
            connect_timeout=min(10.0, self.settings.request_timeout_s),
            read_timeout=self.settings.request_timeout_s,
            retries={"max_attempts": 2, "mode": "standard"},
            # Every message in flight HEADs two objects at once; botocore's default pool (10) would queue them.
            max_pool_connections=64,
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
        try:
            await self.check_targets()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    def _count(self, op: str, outcome: str) -> None:
        self.metrics.storage_requests.labels(backend="s3", operation=op, outcome=outcome).inc()

    async def check_targets(self) -> None:
        """Refuse (:class:`StartupRefused`, naming the setting) a configured target that is not there: a
        bucket HeadBucket does not find or may not ask, an endpoint that does not answer, a filesystem base
        path that is absent or not a directory."""
        for i, t in enumerate(self.settings.s3_targets):
            what = f"offload.s3_targets[{i}]: {_describe(t)}"
            try:
                await self._head_bucket(self._clients[_target_key(t)], t.bucket)
            except ClientError as e:
                code = _error_code(e)
                if code in _NOT_FOUND:
                    raise StartupRefused(f"{what}: no such bucket (HeadBucket: {code})") from e
                if code in ("403", "AccessDenied", "Forbidden"):
                    raise StartupRefused(
                        f"{what}: HeadBucket denied ({code}); the worker's credentials need s3:ListBucket on "
                        "the bucket (without it S3 answers 403, not 404, for a deleted object too)"
                    ) from e
                raise StartupRefused(f"{what}: HeadBucket failed ({code}: {e})") from e
            except (TimeoutError, BotoCoreError, OSError) as e:
                raise StartupRefused(f"{what}: unreachable ({type(e).__name__}: {e})") from e
        base = self.settings.filesystem_base_path
        if base is not None:
            try:
                st = await asyncio.to_thread(os.stat, base)
            except FileNotFoundError as e:
                raise StartupRefused(f"offload.filesystem_base_path {base}: does not exist (not mounted?)") from e
            except OSError as e:
                raise StartupRefused(f"offload.filesystem_base_path {base}: {e}") from e
            if not stat.S_ISDIR(st.st_mode):
                raise StartupRefused(f"offload.filesystem_base_path {base}: not a directory")
            self._fs_device = st.st_dev

    async def _head_bucket(self, client: Any, bucket: str) -> None:
        """HeadBucket; raises what the client raised, counted."""
        try:
            await client.head_bucket(Bucket=bucket)
        except ClientError as e:
            self._count("head_bucket", "not_found" if _error_code(e) in _NOT_FOUND else "error")
            raise
        except (TimeoutError, BotoCoreError, OSError):
            self._count("head_bucket", "error")
            raise
        self._count("head_bucket", "ok")

    async def _confirm_bucket(self, client: Any, target: S3Target) -> None:
        """Before a not-found is settled: the bucket is there, or the decision fails (transient). Asked
        every time, never cached: a bucket gone a moment ago must not make one deletion "already gone"."""
        try:
            await self._head_bucket(client, target.bucket)
        except ClientError as e:
            code = _error_code(e)
            raise BackendError(
                "s3", f"HeadBucket {_describe(target)}: {code}: the objects' 404 is not proof they are gone"
            ) from e
        except (TimeoutError, BotoCoreError, OSError) as e:
            raise BackendError("s3", f"HeadBucket {_describe(target)}: {type(e).__name__}: {e}") from e

    async def _confirm_base(self, base: Path) -> None:
        """Before a not-found is settled: the base path is the directory, on the device, it was at start."""
        try:
            st = await asyncio.to_thread(os.stat, base)
        except OSError as e:
            raise BackendError("filesystem", f"base path {base}: {e}: nothing is proven gone") from e
        if not stat.S_ISDIR(st.st_mode):
            raise BackendError("filesystem", f"base path {base} is no longer a directory: nothing is proven gone")
        if self._fs_device is not None and st.st_dev != self._fs_device:
            raise BackendError(
                "filesystem",
                f"base path {base} is on another device than at start (unmounted or remounted): nothing is"
                " proven gone; restart the worker once it is mounted as intended",
            )

    async def inspect(self, info: PendingDeleteLedgerInfo) -> Stored:
        """What tiered storage holds of the announced offloaded copy. Only configured targets are ever
        asked; identity (the objects' ``ManagedLedgerName``) is judged by ``worker.core.verification``."""
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
        sizes: list[int | None] = []
        keys = offload_keys(ctx, info.ledger_id)
        heads = await asyncio.gather(*(self._head(client, target.bucket, key) for key in keys))
        for key, head in zip(keys, heads, strict=True):
            if head is not None:
                present.append(key)
                metadata.append(head[0])
                sizes.append(head[1])
        if not present:
            await self._confirm_bucket(client, target)
            return Missing()
        size = None if None in sizes else sum(s for s in sizes if s is not None)
        return StoredObjects("s3", (target, present), tuple(metadata), size)

    async def _head(self, client: Any, bucket: str, key: str) -> tuple[dict[str, str], int | None] | None:
        """The object's user metadata and size (Content-Length), or None when it is not there."""
        try:
            r = await client.head_object(Bucket=bucket, Key=key)
        except ClientError as e:
            code = _error_code(e)
            if code in ("404", "NoSuchKey", "NotFound"):
                # Also a missing bucket's answer: ``inspect`` confirms the bucket before settling it.
                self._count("head", "not_found")
                return None
            self._count("head", "error")
            raise BackendError("s3", f"HEAD {bucket}/{key}: {code} {e}") from e
        except (TimeoutError, BotoCoreError, OSError) as e:
            self._count("head", "error")
            raise BackendError("s3", f"HEAD {bucket}/{key}: {type(e).__name__}: {e}") from e
        self._count("head", "ok")
        length = r.get("ContentLength")
        return dict(r.get("Metadata") or {}), length if isinstance(length, int) and length >= 0 else None

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
        # Copies of other messages being deleted from the same bucket at the same time go in the same
        # DeleteObjects request (``GroupCommit``); each message still hears only about its own keys.
        await self._deletes[_target_key(target)].submit((target, tuple(keys)))

    def _delete_objects(self, _key: object) -> Commit[tuple[S3Target, tuple[str, ...]], None]:
        async def commit(copies: list[tuple[S3Target, tuple[str, ...]]]) -> list[BaseException | None]:
            target = copies[0][0]
            client = self._clients[_target_key(target)]
            keys = [k for _, ks in copies for k in ks]
            try:
                r = await client.delete_objects(
                    Bucket=target.bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True}
                )
            except (TimeoutError, ClientError, BotoCoreError, OSError) as e:
                self._count("delete", "error")
                raise BackendError("s3", f"DeleteObjects {target.bucket} {keys}: {type(e).__name__}: {e}") from e
            failed = {str(e.get("Key")): e for e in r.get("Errors", []) if e.get("Code") not in ("NoSuchKey", "404")}
            self._count("delete", "error" if failed else "ok")
            answers: list[BaseException | None] = []
            for _, ks in copies:
                errors = [failed[k] for k in ks if k in failed]
                answers.append(BackendError("s3", f"DeleteObjects {target.bucket}: {errors}") if errors else None)
            return answers

        return commit

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
        if exists:
            return StoredObjects("filesystem", path, None, await asyncio.to_thread(_tree_size, path))
        await self._confirm_base(base)
        return Missing()


def _tree_size(path: Path) -> int | None:
    """The bytes of the files under the filesystem copy's directory (Hadoop's MapFile: data and index);
    None when they cannot all be read: the size is reported, never guessed."""
    try:
        if not path.is_dir():
            return path.lstat().st_size
        total = 0
        for root, _dirs, files in os.walk(path, onerror=_raise):
            for name in files:
                total += os.lstat(os.path.join(root, name)).st_size
        return total
    except OSError:
        return None


def _raise(e: OSError) -> None:
    raise e


async def check_offload_targets(settings: OffloadSettings) -> None:
    """:meth:`TieredStorage.check_targets` for a Spark driver, which opens none of the worker's storage (the
    nightly replay and audit, before they read): the same check, the same refusal. The filesystem base path
    is checked where it is mounted: by the daemon, and by the replay's executors."""
    async with TieredStorage(settings.model_copy(update={"filesystem_base_path": None})):
        pass
