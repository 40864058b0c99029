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
import json
import sys

from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "inflight", help="backlog of pending + retry + DLQ (0: all queued work is done)", description=__doc__
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--bytes", action="store_true", help="also sum what the queued deletions would free")
    p.add_argument("--limit", type=int, default=10_000, help="with --bytes: read at most this many messages per topic")
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    from worker.core.freed_bytes import human_bytes
    from worker.operations.queue_status import QueuedBytes, inflight_from_settings

    if args.limit < 1:
        print("ledger-deletion-worker inflight: --limit must be >= 1", file=sys.stderr)
        return 2
    try:
        res = asyncio.run(inflight_from_settings(settings, with_bytes=args.bytes, limit=args.limit))
    except Exception as e:
        print(f"ledger-deletion-worker inflight: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
        return 0

    def size(q: QueuedBytes | None) -> str:
        if q is None:
            return ""
        unknown = f" + {q.unknown} unknown" if q.unknown else ""
        partial = f" (first {args.limit} messages)" if not q.complete else ""
        return f"  {human_bytes(q.bytes)}{unknown}{partial}"

    width = max(len(p.topic) for p in res.parts)
    for p in res.parts:
        note = "" if p.exists else "  (topic absent)"
        print(f"{p.role:<8} {p.topic:<{width}}  {p.subscription:<28} {p.backlog:>8}{size(p.queued)}{note}")
    print(f"{'total':<8} {'':<{width}}  {'':<28} {res.total:>8}{size(res.queued)}")
    if res.queued is not None:
        q = res.queued
        print(f"\nwould free {human_bytes(q.bytes)} ({q.bytes} bytes) over {q.copies} copies")
    return 0
