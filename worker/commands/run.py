"""``run``: the phase-2 deletion daemon in the foreground (SIGTERM/SIGINT drain it cleanly)."""

from __future__ import annotations

import argparse
import asyncio

from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run the deletion worker daemon", description=__doc__)
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    from worker.daemon import run_daemon

    return int(asyncio.run(run_daemon(settings)))
