"""BookKeeper through the bookie HTTP admin API (``httpServerEnabled=true`` on a bookie).

Facts this client relies on (bookkeeper-server 4.17, checked against the local stack):
- ``GET /api/v1/ledger/metadata/?ledger_id=N`` answers ``{"N": {... "customMetadata": {k: base64(v)}}}``
  and a bare 500 when the ledger does not exist, so a 500 is ambiguous: it is resolved by reading the
  ledger list, never by guessing.
- ``GET /api/v1/ledger/list/`` without ``print_metadata`` returns every ledger id in one answer; only
  ``print_metadata=true`` pages (``page`` from 1, 100 per page) and its values are the serialized binary
  metadata forced through a UTF-8 string (lossy), so ids come from the unpaged list and metadata from
  the per-ledger endpoint.
- ``DELETE /api/v1/ledger/delete/?ledger_id=N`` opens a BookKeeper client per call on the bookie.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from worker.http import BackendError


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    custom_metadata: dict[str, str]
    ctime_ms: int | None
    length: int
    state: str
    raw: dict[str, Any] = field(repr=False, default_factory=dict)


def _decode_custom(raw: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in raw.items():
        try:
            out[k] = base64.b64decode(v, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
            # Not Pulsar's value: keep it visibly undecodable so identity checks fail closed.
            out[k] = f"<undecodable:{v!r}>"
    return out


def parse_metadata(ledger_id: int, body: dict[str, Any]) -> LedgerMetadata:
    md = body.get(str(ledger_id))
    if not isinstance(md, dict):
        raise BackendError("bookie", f"metadata response has no entry for ledger {ledger_id}")
    ctime = md.get("ctime")
    return LedgerMetadata(
        ledger_id=ledger_id,
        custom_metadata=_decode_custom(md.get("customMetadata") or {}),
        ctime_ms=int(ctime) if isinstance(ctime, int) and not isinstance(ctime, bool) and ctime > 0 else None,
        length=int(md.get("length") or 0),
        state=str(md.get("state") or ""),
        raw=md,
    )


class BookieClient:
    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session

    async def _get_json(self, path: str, params: dict[str, str]) -> tuple[int, Any]:
        try:
            async with self.session.get(f"{self.base_url}{path}", params=params) as r:
                if r.status != 200:
                    return r.status, None
                return r.status, await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as e:
            raise BackendError("bookie", f"GET {path}: {type(e).__name__}: {e}") from e

    async def list_ledger_ids(self) -> list[int]:
        status, body = await self._get_json("/api/v1/ledger/list/", {})
        if status != 200 or not isinstance(body, dict):
            raise BackendError("bookie", f"ledger list answered {status}", status)
        return sorted(int(k) for k in body)

    async def ledger_exists_by_list(self, ledger_id: int) -> bool:
        return ledger_id in await self.list_ledger_ids()

    async def get_metadata(self, ledger_id: int) -> LedgerMetadata | None:
        """The ledger's metadata, or None when the ledger does not exist."""
        status, body = await self._get_json("/api/v1/ledger/metadata/", {"ledger_id": str(ledger_id)})
        if status == 200 and isinstance(body, dict):
            return parse_metadata(ledger_id, body)
        if status in (404, 500):
            # The bookie answers 500 both for "no such ledger" and for real failures: read again.
            if not await self.ledger_exists_by_list(ledger_id):
                return None
            raise BackendError("bookie", f"metadata of existing ledger {ledger_id} answered {status}", status)
        raise BackendError("bookie", f"metadata of ledger {ledger_id} answered {status}", status)

    async def delete_ledger(self, ledger_id: int) -> bool:
        """Delete; True if this call removed it, False if it was already gone. Errors raise."""
        try:
            async with self.session.delete(
                f"{self.base_url}/api/v1/ledger/delete/", params={"ledger_id": str(ledger_id)}
            ) as r:
                status = r.status
                text = (await r.text())[:300]
        except (aiohttp.ClientError, TimeoutError) as e:
            raise BackendError("bookie", f"DELETE ledger {ledger_id}: {type(e).__name__}: {e}") from e
        if status == 200:
            # ZooKeeper mode answers 200 for a missing ledger too; either way it is gone now.
            return True
        # Ambiguous (e.g. 500 that may mean "no such ledger"): the answer is whether it still exists.
        if await self.get_metadata(ledger_id) is None:
            return False
        raise BackendError("bookie", f"DELETE ledger {ledger_id} answered {status}: {text}", status)

    async def heartbeat(self) -> bool:
        try:
            async with self.session.get(f"{self.base_url}/heartbeat") as r:
                return r.status == 200
        except (aiohttp.ClientError, TimeoutError):
            return False
