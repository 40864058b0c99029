"""``run``: the phase-2 deletion daemon in the foreground (SIGTERM/SIGINT drain it cleanly)."""

from __future__ import annotations

import argparse
import asyncio
import sys

from worker.errors import StartupRefused
from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run the deletion worker daemon", description=__doc__)
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    # Lazy so --help stays fast: the daemon loads every I/O client.
    from worker.daemon.daemon import run_daemon

    if not settings.zookeeper.metadata_store_url:
        # The metadata store is half of every "topic gone" proof and settles the bookie's ambiguous
        # answers: without it the worker could only ever retry orphans of deleted topics.
        print(
            "ledger-deletion-worker run: zookeeper.metadata_store_url: the worker needs the metadata store",
            file=sys.stderr,
        )
        return 2

    try:
        return int(asyncio.run(run_daemon(settings)))
    except StartupRefused as e:
        print(f"ledger-deletion-worker run: {e}", file=sys.stderr)
        return 2
