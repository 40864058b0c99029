"""The S3 route: offloaded copies deleted by the worker against raw ``DeleteObjects`` of the same kind of
keys on the same S3-API server, in one run (part of ``python -m bench.goals``, ``BENCH_GOALS=s3``).

Each copy is what Pulsar's jcloud offloader leaves: ``{uuid}-ledger-{id}`` and its ``-index``, with the
``ManagedLedgerName`` user metadata the worker verifies. The raw row deletes its own copies' keys with
``DeleteObjects`` of 1,000 keys (S3's maximum) in sequence: the storage's own ceiling.

A third row is the floor the identity rule sets: before a copy is deleted, each of its objects' metadata is
read (one ``HEAD`` each: the ``ManagedLedgerName`` that proves whose copy it is; S3 lists no user metadata).
That row sends only those HEADs, presigned before the clock starts and sent over one aiohttp session at the
worker's concurrency (the server's own cost, with no client library's), then the same ``DeleteObjects``: no
program that keeps the rule deletes copies faster on this server.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import aiohttp

from bench import drain
from bench.result import Row
from testkit.stack import Stack, s3_client
from worker.formats.message import LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.formats.topic_name import TopicName


def _copies(s: Stack, topic: str, ids: range) -> tuple[OffloadContext, list[str]]:
    ctx = OffloadContext.from_uuid(
        uuid.uuid4(), "aws-s3", {"bucket": s.s3_bucket, "region": "us-east-1", "serviceEndpoint": s.s3_endpoint}
    )
    keys = [k for lid in ids for k in (f"{ctx.uuid}-ledger-{lid}", f"{ctx.uuid}-ledger-{lid}-index")]
    ml_name = TopicName.parse(topic).managed_ledger_name
    client = s3_client(s)
    with ThreadPoolExecutor(8) as pool:  # boto3 clients are thread-safe
        list(
            pool.map(
                lambda k: client.put_object(
                    Bucket=s.s3_bucket, Key=k, Body=b"o" * 64, Metadata={"ManagedLedgerName": ml_name}
                ),
                keys,
            )
        )
    return ctx, keys


def _chunks(keys: list[str], n: int) -> Iterator[list[str]]:
    for i in range(0, len(keys), n):
        yield keys[i : i + n]


def raw_delete_objects(s: Stack, keys: list[str]) -> Row:
    row = Row(
        f"raw-s3-{len(keys) // 2}", "raw S3 DeleteObjects, 1,000 keys a request", "raw", "-", "s3", 1, len(keys) // 2
    )
    client = s3_client(s)
    start = time.monotonic()
    for chunk in _chunks(keys, 1000):
        r = client.delete_objects(Bucket=s.s3_bucket, Delete={"Objects": [{"Key": k} for k in chunk], "Quiet": True})
        if r.get("Errors"):
            row.errors.append(str(r["Errors"][:3]))
    row.completed = row.n
    row.finish(time.monotonic() - start)
    row.extra["unit"] = "offloaded copies (2 objects each)"
    return row


async def heads_then_delete_objects(s: Stack, keys: list[str], concurrency: int) -> Row:
    row = Row(
        f"floor-s3-{len(keys) // 2}",
        f"the identity rule's floor: a HEAD of each object ({concurrency} in flight), then DeleteObjects",
        "raw",
        "-",
        "s3",
        concurrency,
        len(keys) // 2,
    )
    gate = asyncio.Semaphore(concurrency)
    client = s3_client(s)
    urls = [
        client.generate_presigned_url("head_object", Params={"Bucket": s.s3_bucket, "Key": k}, ExpiresIn=3600)
        for k in keys
    ]
    missing = 0

    async def head(session: aiohttp.ClientSession, url: str) -> None:
        nonlocal missing
        async with gate, session.head(url) as r:
            if r.status != 200 or "x-amz-meta-managedledgername" not in {h.lower() for h in r.headers}:
                missing += 1

    start = time.monotonic()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=concurrency)) as session:
        await asyncio.gather(*(head(session, u) for u in urls))
    raw = await asyncio.to_thread(raw_delete_objects, s, keys)
    row.completed = row.n
    row.finish(time.monotonic() - start)
    row.errors += raw.errors
    if missing:
        row.errors.append(f"{missing} HEADs found no object with its ManagedLedgerName")
    row.extra["unit"] = "offloaded copies (2 objects each)"
    return row


async def compare(s: Stack, out: Path, run_id: str, n: int, concurrency: int) -> tuple[Row, Row, Row]:
    topic = f"persistent://public/default/ldw-bench-s3-gone-{run_id}"
    print(f"[bench] S3 route: {2 * n} offloaded copies ({4 * n} objects) ...", flush=True)
    _, raw_keys = await asyncio.to_thread(_copies, s, topic, range(1, n + 1))
    ctx, _ = await asyncio.to_thread(_copies, s, topic, range(n + 1, 2 * n + 1))
    _, floor_keys = await asyncio.to_thread(_copies, s, topic, range(2 * n + 1, 3 * n + 1))
    raw = await asyncio.to_thread(raw_delete_objects, s, raw_keys)
    floor = await heads_then_delete_objects(s, floor_keys, concurrency)
    floor.baseline, floor.ratio = raw.key, (floor.rate / raw.rate if floor.rate and raw.rate else None)
    infos = [
        PendingDeleteLedgerInfo(
            topic, LedgerComponent.MANAGED_LEDGER, LedgerType.OFFLOAD_LEDGER, lid, offload_context=ctx
        )
        for lid in range(n + 1, 2 * n + 1)
    ]
    worker = await drain.drain(
        s,
        out,
        key=f"worker-s3-{n}",
        what=f"worker, offloaded copies on S3, max_inflight={concurrency}",
        run_id=run_id,
        infos=infos,
        route="direct",
        concurrency=concurrency,
        delete_via="zookeeper",
        deadline_s=60 + n * 0.5,
        offload=True,
    )
    worker.baseline, worker.ratio = raw.key, (worker.rate / raw.rate if worker.rate and raw.rate else None)
    left = await asyncio.to_thread(_left, s, ctx)
    worker.extra["objects_left"] = left
    if left:
        worker.errors.append(f"{left} objects of the worker's copies still in the bucket")
    return raw, floor, worker


def _left(s: Stack, ctx: OffloadContext) -> int:
    client = s3_client(s)
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=s.s3_bucket, Prefix=str(ctx.uuid))
    return sum(len(p.get("Contents", [])) for p in pages)
