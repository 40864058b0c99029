"""The baseline: ledgers deleted straight through the storage API, no queue, no checks.

- bookie HTTP admin, a plain sequential loop (one keep-alive connection, one DELETE after the other);
- bookie HTTP admin, an asyncio loop with ``concurrency`` DELETEs in flight;
- ZooKeeper, ``concurrency`` znode deletes in flight on one session (the comparator of the worker's
  ``delete_via=zookeeper`` mode).

Every loop is bounded by its id list and by a deadline; latencies are per call, measured here.
"""

from __future__ import annotations

import asyncio
import http.client
import time
import urllib.parse
from collections import deque
from typing import Any

import aiohttp
from kazoo.exceptions import NoNodeError

from bench.result import Row
from bench.stats import sample_quantiles
from worker.backends.stores import Stores

DELETE_PATH = "/api/v1/ledger/delete/"


def _finish(row: Row, latencies: list[float], seconds: float) -> Row:
    row.finish(seconds)
    row.latency_s = sample_quantiles(latencies)
    row.latency_mean_s = sum(latencies) / len(latencies) if latencies else None
    row.latency_source = "per call, measured"
    return row


def bookie_sequential(base_url: str, ids: list[int], deadline_s: float) -> Row:
    row = Row(
        "raw-bookie-seq",
        "raw bookie HTTP DELETE, sequential loop",
        "raw",
        "-",
        "bookie-http",
        1,
        len(ids),
    )
    u = urllib.parse.urlsplit(base_url)
    host, port = u.hostname or "127.0.0.1", u.port or 80

    def connect() -> http.client.HTTPConnection:
        return http.client.HTTPConnection(host, port, timeout=60)

    conn = connect()
    latencies: list[float] = []
    start = time.monotonic()
    end = start + deadline_s
    try:
        for lid in ids:
            if time.monotonic() > end:
                row.errors.append(f"deadline {deadline_s:.0f}s passed after {row.completed} deletes")
                break
            t = time.monotonic()
            try:
                conn.request("DELETE", f"{DELETE_PATH}?ledger_id={lid}")
                r = conn.getresponse()
                r.read()
                status = r.status
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                conn = connect()
                row.errors.append(f"ledger {lid}: {type(e).__name__}: {e}")
                continue
            latencies.append(time.monotonic() - t)
            if status == 200:
                row.completed += 1
            else:
                row.errors.append(f"ledger {lid}: HTTP {status}")
    finally:
        conn.close()
    return _finish(row, latencies, time.monotonic() - start)


async def bookie_concurrent(base_url: str, ids: list[int], concurrency: int, deadline_s: float) -> Row:
    row = Row(
        f"raw-bookie-c{concurrency}",
        f"raw bookie HTTP DELETE, asyncio, {concurrency} in flight",
        "raw",
        "-",
        "bookie-http",
        concurrency,
        len(ids),
    )
    url = f"{base_url.rstrip('/')}{DELETE_PATH}"
    sem = asyncio.Semaphore(concurrency)
    latencies: list[float] = []
    start = time.monotonic()
    end = start + deadline_s

    async def one(session: aiohttp.ClientSession, lid: int) -> None:
        async with sem:
            if time.monotonic() > end:
                return
            t = time.monotonic()
            try:
                async with session.delete(url, params={"ledger_id": str(lid)}) as r:
                    await r.read()
                    status = r.status
            except (aiohttp.ClientError, TimeoutError) as e:
                row.errors.append(f"ledger {lid}: {type(e).__name__}: {e}")
                return
            latencies.append(time.monotonic() - t)
            if status == 200:
                row.completed += 1
            else:
                row.errors.append(f"ledger {lid}: HTTP {status}")

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency), timeout=aiohttp.ClientTimeout(total=deadline_s)
    ) as session:
        await asyncio.gather(*(one(session, lid) for lid in ids))
    if row.completed + len(row.errors) < len(ids):
        row.errors.append(f"deadline {deadline_s:.0f}s passed after {row.completed} deletes")
    return _finish(row, latencies, time.monotonic() - start)


async def zookeeper_concurrent(hosts: str, ids: list[int], concurrency: int, deadline_s: float) -> Row:
    row = Row(
        f"raw-zk-c{concurrency}",
        f"raw ZooKeeper znode delete, {concurrency} in flight",
        "raw",
        "-",
        "zookeeper",
        concurrency,
        len(ids),
    )
    async with Stores(f"zk:{hosts}") as zk:
        paths = [await zk.bookkeeper.ledger_path(lid) for lid in ids]
        latencies: list[float] = []

        def window() -> float:
            pending: deque[tuple[int, float, Any]] = deque()

            def settle() -> None:
                lid, t, result = pending.popleft()
                try:
                    result.get(timeout=30)
                    row.completed += 1
                except NoNodeError:
                    row.errors.append(f"ledger {lid}: no znode")
                except Exception as e:
                    row.errors.append(f"ledger {lid}: {type(e).__name__}: {e}")
                latencies.append(time.monotonic() - t)

            start = time.monotonic()
            for lid, path in zip(ids, paths, strict=True):
                if time.monotonic() > start + deadline_s:
                    row.errors.append(f"deadline {deadline_s:.0f}s passed")
                    break
                pending.append((lid, time.monotonic(), zk.kv.client.delete_async(path)))
                while len(pending) >= concurrency:
                    settle()
            while pending:
                settle()
            return time.monotonic() - start

        seconds = await asyncio.to_thread(window)
    return _finish(row, latencies, seconds)
