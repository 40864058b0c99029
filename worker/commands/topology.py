"""``topology``: create the deletion topics, their schema and subscriptions, make the queue namespace's
policies safe (no message TTL, no subscription expiration, no evicting backlog quota, no deletion of
caught-up topics: ``run`` refuses to start on any of them), and exit.

The worker and phase 1 create what is missing at start, which takes tenant-admin rights on the topics'
namespace. Where they run with least-privileged roles (docs/operations.md), run this once with a
tenant-admin token instead; it is idempotent.
"""

from __future__ import annotations

import argparse
import asyncio
import sys

from worker.errors import BackendError, StartupRefused
from worker.formats.topic_name import TopicName
from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "topology",
        help="create the deletion topics and subscriptions, make their policies safe (tenant admin)",
        description=__doc__,
    )
    p.set_defaults(handler=handle)
    return p


async def _create(settings: Settings) -> None:
    # Lazy so --help stays fast: the Pulsar client, aiohttp, kazoo and structlog.
    from worker.broker.admin import open_admin
    from worker.broker.preflight import check_admin
    from worker.broker.topology import ensure_queue_policies, ensure_topology

    p = settings.pulsar
    async with open_admin(p) as admin:
        await check_admin(admin, p, TopicName.parse(settings.topics.pending))
        await ensure_topology(admin, settings.topics)
        await ensure_queue_policies(admin, settings.topics)


def handle(args: argparse.Namespace, settings: Settings) -> int:
    try:
        asyncio.run(_create(settings))
    except (StartupRefused, BackendError) as e:
        print(f"ledger-deletion-worker topology: {e}", file=sys.stderr)
        return 2
    t = settings.topics
    print(
        f"topology in place: {t.pending} ({t.parallelism} partitions), {t.retry}, {t.dlq}; "
        f"subscriptions {t.subscription}, {t.dlq_replay_subscription}; no policy drops queued work"
    )
    return 0
