"""``purge-topic``: delete a topic the two-phase way.

Queues a pending deletion for every ledger the topic owns (data, cursors, schema, compacted, offloaded
copies), and only then deletes the topic through the admin API (force). Safe to re-run after a crash or
an interruption: while the topic exists everything is re-collected and re-sent (the worker treats a
ledger that is already gone as done); once it is gone, everything was queued before the delete.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from worker.commands.terminal import command_failed
from worker.formats.topic_name import InvalidTopicName, TopicName
from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "purge-topic", help="queue every ledger of a topic for deletion, then delete the topic", description=__doc__
    )
    p.add_argument("topic", help="persistent://tenant/ns/topic (a partitioned topic's base name purges all partitions)")
    p.add_argument(
        "--no-delete-topic",
        dest="delete_topic",
        action="store_false",
        help="stop after queueing the deletions; leave the topic in place",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON on the last line")
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    try:
        topic = TopicName.parse(args.topic)
        if topic.is_segment:
            # Purging deletes the topic through the admin API, which has no per-segment resource (5.0).
            raise InvalidTopicName(f"{topic} is a scalable topic's segment: purge-topic takes persistent topics only")
    except InvalidTopicName as e:
        print(f"ledger-deletion-worker purge-topic: {e}", file=sys.stderr)
        return 2
    # Lazy so --help stays fast: structlog.
    from worker.logs import configure

    configure(settings.logging.level, settings.logging.format)
    try:
        return asyncio.run(_run(args, settings, topic))
    except Exception as e:
        return command_failed("purge-topic", e)


async def _run(args: argparse.Namespace, settings: Settings, topic: object) -> int:
    # Lazy so --help stays fast: the Pulsar client, aiohttp and kazoo.
    from worker.backends.stores import optional_stores
    from worker.broker.admin import open_admin
    from worker.broker.preflight import prove_metadata_stores
    from worker.operations.purge import purge_topic

    assert isinstance(topic, TopicName)
    s = settings
    async with open_admin(s.pulsar) as admin, optional_stores(s.zookeeper) as zk:
        if zk is not None:
            await prove_metadata_stores(zk, admin, TopicName.parse(s.topics.pending))
        res = await purge_topic(
            s, topic, admin, delete_topic=args.delete_topic, zk=zk, say=lambda m: print(m, flush=True)
        )
    if args.json:
        print(json.dumps(res.to_dict(), sort_keys=True))
    return 1 if res.failed else 0
