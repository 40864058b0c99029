"""BookKeeper through the bookie HTTP admin API (``httpServerEnabled=true`` on a bookie).

Facts this client relies on (bookkeeper-server 4.17, checked against the local stack):
- ``GET /api/v1/ledger/metadata/?ledger_id=N`` answers ``{"N": {... "customMetadata": {k: base64(v)}}}``
  and a bare 500 when the ledger does not exist, so a 500 is ambiguous: it is resolved by one per-ledger
  read of the metadata store (``ledger_exists``), never by guessing and never by listing every ledger of
  the cluster (that cost grows with the cluster, per message).
- ``GET /api/v1/ledger/list/`` without ``print_metadata`` returns every ledger id in one answer; only
  ``print_metadata=true`` pages (``page`` from 1, 100 per page) and its values are the serialized binary
  metadata forced through a UTF-8 string (lossy), so ids come from the unpaged list and metadata from
  the per-ledger endpoint.
- ``DELETE /api/v1/ledger/delete/?ledger_id=N`` opens a BookKeeper client per call on the bookie, and
  a bookie's HTTP server (Vert.x) runs these calls one at a time, so one bookie's delete rate is the
  ceiling however many calls overlap (docs/benchmarks.md, bookie HTTP route). Any bookie deletes any
  ledger, so the client spreads calls over all of them.
- Any bookie deletes any ledger *of its own cluster*: so, given the metadata store's registered bookies,
  the client proves each endpoint belongs to that cluster (``worker.core.bookie_identity``) before it
  sends it a call, and :meth:`BookieClient.verify_endpoints` does so for all of them at start.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Container, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from worker.core.bookie_identity import bookie_id_from_config, why_not_ours
from worker.errors import BackendError
from worker.formats.ledger_metadata import LedgerMetadata, parse_metadata


class LedgerStore(Protocol):
    """Where the pipeline reads a ledger's metadata and deletes the ledger. ``read`` returns the
    metadata and a token that ``delete`` uses to delete exactly what was verified (a znode version),
    or None when the ledger does not exist."""

    async def read(self, ledger_id: int, prefetched: Any = None) -> tuple[LedgerMetadata, object] | None:
        """``prefetched``: the ledger's metadata znode as the daemon's batch read it (``worker.core.dispatch``),
        for a store that reads that znode; another store reads for itself."""
        ...

    async def delete(self, ledger_id: int, token: object) -> bool: ...


class CountedLedgerStore:
    """A :class:`LedgerStore` that reports every call's outcome (``ok``, ``not_found``, ``error``) to
    ``on_request(operation, outcome)``: the operators' request and error rates for BookKeeper, whichever
    store is configured."""

    def __init__(self, inner: LedgerStore, on_request: Callable[[str, str], None]) -> None:
        self.inner = inner
        self._on_request = on_request

    async def read(self, ledger_id: int, prefetched: Any = None) -> tuple[LedgerMetadata, object] | None:
        try:
            found = await self.inner.read(ledger_id, prefetched)
        except Exception:
            self._on_request("read", "error")
            raise
        self._on_request("read", "ok" if found is not None else "not_found")
        return found

    async def delete(self, ledger_id: int, token: object) -> bool:
        try:
            deleted = await self.inner.delete(ledger_id, token)
        except Exception:
            self._on_request("delete", "error")
            raise
        self._on_request("delete", "ok" if deleted else "not_found")
        return deleted


@dataclass(slots=True)
class BookieEndpoint:
    """One bookie's HTTP admin API, as the client sees it: calls in flight, until when it is skipped
    after refusing a connection (or proving foreign), and whether it is proven a bookie of our cluster."""

    url: str
    inflight: int = 0
    down_until: float = 0.0
    verified: bool = True


class BookieNotInCluster(Exception):
    """A configured bookie HTTP endpoint answered, but is not a bookie of our BookKeeper cluster (or
    cannot tell which bookie it is)."""

    def __init__(self, url: str, why: str) -> None:
        super().__init__(f"{url}: {why}")
        self.url = url
        self.why = why


def pick_endpoint(endpoints: Sequence[BookieEndpoint], now: float, exclude: Container[str] = ()) -> BookieEndpoint:
    """The endpoint for the next call: the one with the fewest calls in flight among those not marked down
    (ties to the earliest listed). A bookie serves its delete endpoint one call at a time, so the least
    busy one is the one that answers first. When every candidate is down, the one that went down first
    (its mark is the oldest) is tried rather than failing without a call."""
    candidates = [e for e in endpoints if e.url not in exclude] or list(endpoints)
    up = [e for e in candidates if e.down_until <= now]
    if up:
        return min(up, key=lambda e: e.inflight)
    return min(candidates, key=lambda e: e.down_until)


class BookieClient:
    """The bookie HTTP admin API of one or several bookies. Any bookie reads and deletes any ledger of the
    cluster (it goes through the metadata store and the ensemble), and each bookie serves deletes one at a
    time, so calls are spread over every configured endpoint (least busy first). A bookie that refuses the
    connection is skipped for ``down_s`` and the call goes to another one; a call that reached a bookie is
    never re-sent elsewhere (its outcome is settled like any other answer)."""

    def __init__(
        self,
        base_url: str | Sequence[str],
        session: aiohttp.ClientSession,
        ledger_exists: Callable[[int], Awaitable[bool]] | None = None,
        *,
        down_s: float = 5.0,
        on_request: Callable[[str, str, str], None] | None = None,
        registered_bookies: Callable[[], Awaitable[frozenset[str]]] | None = None,
    ) -> None:
        urls = [base_url] if isinstance(base_url, str) else list(base_url)
        if not urls:
            raise ValueError("BookieClient needs at least one bookie HTTP endpoint")
        # With the metadata store's registered bookies, no endpoint serves a call before it is proven to
        # be one of them; without (tools, tests), every endpoint is trusted.
        self.registered_bookies = registered_bookies
        verified = registered_bookies is None
        self.endpoints = [BookieEndpoint(u.rstrip("/"), verified=verified) for u in dict.fromkeys(urls)]
        self.base_url = self.endpoints[0].url
        self.session = session
        # The metadata store's per-ledger answer (``ZooKeeper.ledger_metadata_exists``) that settles an
        # ambiguous 500; without one, an ambiguous answer stays a failure.
        self.ledger_exists = ledger_exists
        self.down_s = down_s
        # (endpoint, operation, outcome): outcome is the HTTP status, or "unreachable" / "error".
        self._on_request = on_request

    def any_verified(self) -> bool:
        """Whether one endpoint at least is proven a bookie of our cluster (every one, without a store)."""
        return any(ep.verified for ep in self.endpoints)

    def _note(self, ep: BookieEndpoint, operation: str, outcome: str) -> None:
        if self._on_request is not None:
            self._on_request(ep.url, operation, outcome)

    async def _get_from(self, ep: BookieEndpoint, path: str, params: dict[str, str] | None = None) -> Any:
        """GET JSON from this one endpoint (the identity check: never spread to another bookie)."""
        async with self.session.get(f"{ep.url}{path}", params=params) as r:
            self._note(ep, "identify", str(r.status))
            if r.status >= 500:
                # A bookie failing for now (starting, overloaded): nothing proven either way.
                raise aiohttp.ClientResponseError(r.request_info, (), status=r.status, message=f"GET {path}")
            if r.status != 200:
                raise BookieNotInCluster(ep.url, f"GET {path} answered {r.status}: cannot tell which bookie it is")
            try:
                return await r.json(content_type=None)
            except ValueError as e:
                raise BookieNotInCluster(ep.url, f"GET {path}: not JSON ({e}): not a bookie HTTP API") from e

    async def _verify(self, ep: BookieEndpoint) -> bool:
        """Prove ``ep`` a bookie of our cluster: True when it is, False when no answer came (refused, cut,
        timed out: marked down, left unverified). Raises :class:`BookieNotInCluster` when it answers and
        is not (or cannot say which bookie it is)."""
        assert self.registered_bookies is not None
        try:
            conf = await self._get_from(ep, "/api/v1/config/server_config")
            if not isinstance(conf, dict):
                raise BookieNotInCluster(ep.url, "server_config is not a JSON object: not a bookie HTTP API")
            own_id = bookie_id_from_config(conf)
            its_cluster: set[str] | None = None
            if own_id is None:
                its_cluster = set()
                for kind in ("rw", "ro"):
                    listed = await self._get_from(ep, "/api/v1/bookie/list_bookies", {"type": kind})
                    its_cluster |= set(listed) if isinstance(listed, dict) else set()
        except (aiohttp.ClientError, TimeoutError) as e:
            # Refused, cut or silent: nothing proven either way. Left out like a bookie that refused a
            # connection, and asked again when its turn comes after down_s.
            ep.down_until = time.monotonic() + self.down_s
            self._note(ep, "identify", "unreachable" if isinstance(e, aiohttp.ClientConnectorError) else "error")
            return False
        why = why_not_ours(own_id, its_cluster, await self.registered_bookies())
        if why is not None:
            self._note(ep, "identify", "foreign")
            raise BookieNotInCluster(ep.url, why)
        ep.verified = True
        return True

    async def verify_endpoints(self) -> None:
        """At start: prove every reachable endpoint a bookie of our cluster. Raises
        :class:`BookieNotInCluster` for the first that is not; one that cannot be reached stays
        unverified and is proven before its first call (as a bookie that is down at start may be)."""
        if self.registered_bookies is None:
            return
        for ep in self.endpoints:
            if not ep.verified:
                await self._verify(ep)

    @contextlib.asynccontextmanager
    async def _call(
        self, method: str, path: str, params: dict[str, str], operation: str
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """One HTTP call on the least busy bookie; on a refused connection, the next bookie (each at most
        once). Anything after the connection was made is the caller's to interpret."""
        tried: set[str] = set()
        while True:
            ep = pick_endpoint(self.endpoints, time.monotonic(), tried)
            tried.add(ep.url)
            if not ep.verified:
                try:
                    proven = await self._verify(ep)
                except BookieNotInCluster as e:
                    # A URL that now reaches another cluster's bookie (moved DNS, a changed config): never
                    # sent the call; left out like a bookie that refused, and checked again after down_s.
                    ep.down_until = time.monotonic() + self.down_s
                    if len(tried) < len(self.endpoints):
                        continue
                    raise BackendError("bookie", f"{method} {path}: no bookie of our cluster reachable ({e})") from e
                if not proven:
                    if len(tried) < len(self.endpoints):
                        continue
                    raise BackendError("bookie", f"{method} {path}: no bookie reachable ({ep.url} did not answer)")
            ep.inflight += 1
            try:
                try:
                    async with self.session.request(method, f"{ep.url}{path}", params=params) as r:
                        self._note(ep, operation, str(r.status))
                        yield r
                        return
                except aiohttp.ClientConnectorError as e:
                    ep.down_until = time.monotonic() + self.down_s
                    self._note(ep, operation, "unreachable")
                    if len(tried) < len(self.endpoints):
                        continue
                    raise BackendError("bookie", f"{method} {path}: no bookie reachable ({ep.url}: {e})") from e
                except (aiohttp.ClientError, TimeoutError) as e:
                    self._note(ep, operation, "error")
                    raise BackendError("bookie", f"{method} {path} on {ep.url}: {type(e).__name__}: {e}") from e
            finally:
                ep.inflight -= 1

    async def _get_json(self, path: str, params: dict[str, str], operation: str) -> tuple[int, Any]:
        try:
            async with self._call("GET", path, params, operation) as r:
                if r.status != 200:
                    return r.status, None
                return r.status, await r.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            # Reading the body failed after the bookie answered (cut connection, truncated JSON).
            raise BackendError("bookie", f"GET {path}: {type(e).__name__}: {e}") from e

    async def list_ledger_ids(self) -> list[int]:
        status, body = await self._get_json("/api/v1/ledger/list/", {}, "list")
        if status != 200 or not isinstance(body, dict):
            raise BackendError("bookie", f"ledger list answered {status}", status)
        return sorted(int(k) for k in body)

    async def _still_exists(self, ledger_id: int, what: str) -> bool:
        """Settle an ambiguous answer: does the ledger exist? Asks the metadata store, one ledger."""
        if self.ledger_exists is None:
            raise BackendError(
                "bookie",
                f"{what} for ledger {ledger_id}: ambiguous, and no metadata store (zookeeper.metadata_store_url)",
            )
        return await self.ledger_exists(ledger_id)

    async def get_metadata(self, ledger_id: int) -> LedgerMetadata | None:
        """The ledger's metadata, or None when the ledger does not exist."""
        status, body = await self._get_json("/api/v1/ledger/metadata/", {"ledger_id": str(ledger_id)}, "read")
        if status == 200 and isinstance(body, dict):
            return parse_metadata(ledger_id, body)
        if status in (404, 500):
            # The bookie answers 500 both for "no such ledger" and for real failures: read again.
            if not await self._still_exists(ledger_id, f"metadata answered {status}"):
                return None
            raise BackendError("bookie", f"metadata of existing ledger {ledger_id} answered {status}", status)
        raise BackendError("bookie", f"metadata of ledger {ledger_id} answered {status}", status)

    async def delete_ledger(self, ledger_id: int) -> bool:
        """Delete; True if this call removed it, False if it was already gone. Errors raise."""
        try:
            async with self._call("DELETE", "/api/v1/ledger/delete/", {"ledger_id": str(ledger_id)}, "delete") as r:
                status = r.status
                text = (await r.text())[:300]
        except (aiohttp.ClientError, TimeoutError) as e:
            raise BackendError("bookie", f"DELETE ledger {ledger_id}: {type(e).__name__}: {e}") from e
        if status == 200:
            # ZooKeeper mode answers 200 for a missing ledger too; either way it is gone now.
            return True
        # Ambiguous (e.g. 500 that may mean "no such ledger"): the answer is whether it still exists.
        if not await self._still_exists(ledger_id, f"DELETE answered {status}"):
            return False
        raise BackendError("bookie", f"DELETE ledger {ledger_id} answered {status}: {text}", status)

    async def trigger_gc(self) -> dict[str, str]:
        """Ask every configured bookie for one garbage collection: ``PUT /api/v1/bookie/gc`` with no body
        (BookKeeper's TriggerGCService: ``forceGC()`` with the bookie's own compaction flags; it answers 200
        at once and collects in the background, and a bookie already collecting ignores it). Each endpoint
        is proven a bookie of our cluster first. Returns each endpoint's outcome: the HTTP status, or
        ``unreachable`` / ``foreign`` / ``error``. One call per bookie, never repeated here."""
        out: dict[str, str] = {}
        for ep in self.endpoints:
            try:
                if not ep.verified and not await self._verify(ep):
                    out[ep.url] = "unreachable"
                    continue
                async with self.session.put(f"{ep.url}/api/v1/bookie/gc") as r:
                    out[ep.url] = str(r.status)
            except BookieNotInCluster:
                out[ep.url] = "foreign"
            except aiohttp.ClientConnectorError:
                out[ep.url] = "unreachable"
            except (aiohttp.ClientError, TimeoutError):
                out[ep.url] = "error"
            self._note(ep, "gc", out[ep.url])
        return out


class BookieLedgerStore:
    """:class:`LedgerStore` over the bookie HTTP admin API (``bookkeeper.delete_via=bookie-http``)."""

    def __init__(self, bookie: BookieClient) -> None:
        self.bookie = bookie

    async def read(self, ledger_id: int, prefetched: Any = None) -> tuple[LedgerMetadata, object] | None:
        md = await self.bookie.get_metadata(ledger_id)
        return None if md is None else (md, None)

    async def delete(self, ledger_id: int, token: object) -> bool:
        return await self.bookie.delete_ledger(ledger_id)
