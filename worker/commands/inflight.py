"""``inflight``: how many pending deletions are still queued.

The backlog of the worker subscription on the pending and retry topics plus the backlog of the DLQ
replay subscription, read through the admin API. 0 means everything queued has been settled. Delayed
messages (not deliverable yet) count: they are queued work.
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
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    from worker.operations.queue_status import inflight_from_settings

    try:
        res = asyncio.run(inflight_from_settings(settings))
    except Exception as e:
        print(f"ledger-deletion-worker inflight: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
        return 0
    width = max(len(p.topic) for p in res.parts)
    for p in res.parts:
        note = "" if p.exists else "  (topic absent)"
        print(f"{p.role:<8} {p.topic:<{width}}  {p.subscription:<28} {p.backlog:>8}{note}")
    print(f"{'total':<8} {'':<{width}}  {'':<28} {res.total:>8}")
    return 0
