"""``dlq list``: what is parked in the dead-letter topic, and why.

Reads the DLQ from the earliest message with a Reader, which acknowledges nothing and moves no
subscription. Each message shows its ledger, topic, the reason and last error recorded by the worker
and the number of attempts (``RECONSUMETIMES``). A message the nightly replay has already acknowledged
on its subscription is "replayed" and hidden unless --all.

BYTES is what deleting the message's copy would free, read as the worker reads it before a delete: a
ledger's length from BookKeeper's metadata store (``zookeeper.metadata_service_uri``), an offloaded copy's object sizes;
0 when storage holds nothing of it any more, "unknown" when storage does not record it (a ledger never
closed) or cannot be read. The total counts each copy once.
"""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import asdict

from worker.commands.config_file import config_help
from worker.commands.terminal import Column, Output, add_output_options, command_failed, positive_int, table_topic
from worker.core.freed_bytes import human_bytes
from worker.settings import Settings

# Which copy of the ledger the letter would delete: its BookKeeper copy, or an offloaded one.
COPY = {"LEDGER": "bk", "OFFLOAD_LEDGER": "offload"}
COLUMNS = (
    Column("LEDGER"),
    Column("COPY"),
    Column("TOPIC", shrink="middle", min_width=24, keep=1),
    Column("REASON"),
    Column("ATTEMPTS", align="right"),
    Column("STATE"),
    Column("BYTES", align="right"),
    Column("LAST ERROR", shrink="end", min_width=16, keep=1, optional=True),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("dlq", help="inspect the dead-letter topic", description="Inspect the dead-letter topic.")
    dsub = p.add_subparsers(dest="dlq_command", required=True, metavar="SUBCOMMAND")
    ls = dsub.add_parser("list", help="list dead letters without acknowledging them", description=__doc__)
    ls.add_argument("--limit", type=positive_int, default=1000, help="at most this many messages (default 1000)")
    ls.add_argument("--all", action="store_true", help="include messages the replay subscription already acknowledged")
    add_output_options(ls, json_help="one JSON object per line instead of a table")
    # Also accepted after "list"; SUPPRESS keeps this default from overwriting `dlq --config X list`.
    ls.add_argument(
        "--config",
        "-c",
        default=argparse.SUPPRESS,
        help=config_help(),
    )
    ls.set_defaults(handler=handle_list)
    return p


def handle_list(args: argparse.Namespace, settings: Settings) -> int:
    # Lazy so --help stays fast: the Pulsar client, aiohttp, kazoo and aiobotocore.
    from worker.backends.stores import optional_stores
    from worker.operations.queue_status import DeadLetter, list_dead_letters, would_free

    async def read() -> list[DeadLetter]:
        async with optional_stores(settings.zookeeper) as stores:
            return await list_dead_letters(settings, limit=args.limit, include_replayed=args.all, stores=stores)

    try:
        letters = asyncio.run(read())
    except Exception as e:
        return command_failed("dlq list", e)
    out = Output(args)
    rows = [
        (
            str(d.ledger_id) if d.ledger_id is not None else "?",
            COPY.get(d.ledger_type or "", d.ledger_type or "?"),
            table_topic(d.topic) if d.topic else f"<undecodable: {d.decode_error}>",
            d.reason,
            str(d.attempts) if d.attempts is not None else "?",
            d.state,
            human_bytes(d.bytes) if d.decode_error is None else "",
            " ".join(d.last_error.split()),
        )
        for d in letters
    ]
    out.table(COLUMNS, rows)
    out.line(f"\n{len(letters)} dead letters on {settings.topics.dlq}" + ("" if args.all else " (parked)"))
    # Each copy once: a ledger dead-lettered twice frees its bytes once.
    q = would_free(letters)
    unknown = f"; {q.unknown} of unknown size" if q.unknown else ""
    out.line(f"would free {human_bytes(q.bytes)} ({q.bytes} bytes) over {q.copies} copies{unknown}")
    out.hint()
    out.report([asdict(d) for d in letters], lines=True)
    return 0
