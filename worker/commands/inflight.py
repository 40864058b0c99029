"""``inflight``: how many pending deletions are still queued.

The backlog of the worker subscription on the pending and retry topics plus the backlog of the DLQ
replay subscription, read through the admin API. 0 means everything queued has been settled. Delayed
messages (not deliverable yet) count: they are queued work.

``--bytes`` also reads the unacknowledged messages (a Reader: nothing is acknowledged; at most ``--limit``
per topic) and sums what their copies would free, read as the worker reads them before a delete: a
ledger's length from BookKeeper's metadata store, an offloaded copy's object sizes; a copy queued twice
counts once, and copies whose size storage does not record (a ledger never closed) are counted as unknown.
"""

from __future__ import annotations

import argparse
import asyncio

from worker.commands.terminal import Column, Output, add_output_options, command_failed, positive_int, table_topic
from worker.core.freed_bytes import human_bytes
from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "inflight", help="backlog of pending + retry + DLQ (0: all queued work is done)", description=__doc__
    )
    add_output_options(p, json_help="print the JSON instead of a table")
    p.add_argument("--bytes", action="store_true", help="also sum what the queued deletions would free")
    p.add_argument(
        "--limit", type=positive_int, default=10_000, help="with --bytes: read at most this many messages per topic"
    )
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    # Lazy so --help stays fast: the Pulsar client, aiohttp, kazoo and aiobotocore.
    from worker.backends.stores import optional_stores
    from worker.operations.queue_status import Inflight, QueuedBytes, inflight_from_settings

    async def read() -> Inflight:
        if not args.bytes:
            return await inflight_from_settings(settings, limit=args.limit)
        async with optional_stores(settings.zookeeper) as stores:
            return await inflight_from_settings(settings, with_bytes=True, limit=args.limit, stores=stores)

    try:
        res = asyncio.run(read())
    except Exception as e:
        return command_failed("inflight", e)
    out = Output(args)

    def size(q: QueuedBytes | None) -> str:
        if q is None:
            return ""
        unknown = f" + {q.unknown} unknown" if q.unknown else ""
        partial = f" (first {args.limit})" if not q.complete else ""
        return f"{human_bytes(q.bytes)}{unknown}{partial}"

    columns = [
        Column("ROLE"),
        Column("TOPIC", shrink="middle", min_width=24, keep=1),
        # Short, and read whole: it gives way after the queue topic's middle.
        Column("SUBSCRIPTION", shrink="end", min_width=16, keep=2),
        Column("BACKLOG", align="right"),
    ]
    rows = [[p.role, table_topic(p.topic), p.subscription, str(p.backlog)] for p in res.parts]
    rows.append(["total", "", "", str(res.total)])
    if res.queued is not None:
        columns.append(Column("WOULD FREE", align="right"))
        for row, part in zip(rows, [*res.parts, None], strict=True):
            row.append(size(part.queued if part is not None else res.queued))
    if any(not p.exists for p in res.parts):
        columns.append(Column("NOTE"))
        for row, part in zip(rows, [*res.parts, None], strict=True):
            row.append("topic absent" if part is not None and not part.exists else "")
    out.table(columns, rows)
    if res.queued is not None:
        q = res.queued
        out.line(f"\nwould free {human_bytes(q.bytes)} ({q.bytes} bytes) over {q.copies} copies")
    out.hint()
    out.report(res.to_dict())
    return 0
