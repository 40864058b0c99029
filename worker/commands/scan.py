"""``scan``: find orphaned ledgers in BookKeeper and queue them for deletion.

An orphan is a ledger Pulsar created (``application=pulsar``) that nothing references any more (not its
topic's ledger list, cursor, compacted ledger or schema registry; or its topic is gone) and that is older
than the minimum age. ``--dry-run`` prints a table and a JSON report and sends nothing; without it each
orphan is queued as a PendingDeleteLedgerInfo for the worker, which re-checks everything before deleting.

Output: for a person, a table sized to the terminal (the orphans with ``--dry-run``, else the queued ledgers)
and a summary; ``--output json`` (``--json``) prints only the JSON report instead, ``--report FILE`` also writes
it to FILE. stderr: a progress bar on a terminal, otherwise one structured log line per decision.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import sys
from collections.abc import Sequence
from typing import Any

from worker.commands.terminal import (
    Column,
    Output,
    Progress,
    add_output_options,
    human_age,
    parse_duration,
    table_topic,
)
from worker.core.freed_bytes import human_bytes
from worker.errors import BackendError, StartupRefused
from worker.formats.topic_name import TopicName
from worker.settings import Settings

# Pulsar's rule for tenant and namespace names.
_NS_PART = re.compile(r"^[-=:.\w]+$")
_NS_HELP = "only ledgers of topics in this namespace (tenant/namespace, or tenant/cluster/namespace); repeatable"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "scan",
        help="find orphaned ledgers in BookKeeper (and queue them unless --dry-run)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dry-run", action="store_true", help="report orphans, send nothing")
    p.add_argument("--namespace", "-n", action="append", default=[], metavar="TENANT/NS", help=_NS_HELP)
    p.add_argument(
        "--min-age",
        default=None,
        metavar="DURATION",
        help="ignore ledgers younger than this (e.g. 10m, 90s, 1h; default: worker.min_ledger_age_s)",
    )
    p.add_argument("--concurrency", type=int, default=16, help="parallel metadata / live-state reads (default 16)")
    p.add_argument(
        "--metadata-from",
        choices=("zookeeper", "bookie"),
        default=None,
        help="where ledger metadata is read: the metadata store directly (default when zookeeper.metadata_store_url is "
        "set: one pipelined walk of /ledgers) or the bookie HTTP API (one call per ledger)",
    )
    add_output_options(p)
    p.add_argument("--full", action="store_true", help="list every decision in the report, not only orphans/skips")
    p.set_defaults(handler=handle)
    return p


def valid_namespace(ns: str, *, v1: bool = False) -> bool:
    """``tenant/namespace`` (with ``v1``, a version-1 ``tenant/cluster/namespace`` too), each part by Pulsar's
    rule."""
    parts = ns.split("/")
    return len(parts) in ((2, 3) if v1 else (2,)) and all(_NS_PART.match(x) for x in parts)


def _validate(args: argparse.Namespace, settings: Settings) -> tuple[float, list[str]] | str:
    if args.min_age is None:
        min_age = settings.worker.min_ledger_age_s
    else:
        try:
            min_age = parse_duration(args.min_age)
        except ValueError as e:
            return f"--min-age: {e}"
    namespaces = []
    for ns in args.namespace:
        if not valid_namespace(ns, v1=True):
            return f"--namespace: expected tenant/namespace (or a version-1 tenant/cluster/namespace), got {ns!r}"
        namespaces.append(ns)
    if args.concurrency < 1 or args.concurrency > 1024:
        return "--concurrency: must be between 1 and 1024"
    if getattr(args, "metadata_from", None) == "zookeeper" and not settings.zookeeper.metadata_store_url:
        return "--metadata-from zookeeper: zookeeper.metadata_store_url is not set"
    return min_age, namespaces


def handle(args: argparse.Namespace, settings: Settings) -> int:
    v = _validate(args, settings)
    if isinstance(v, str):
        print(f"ledger-deletion-worker scan: {v}", file=sys.stderr)
        return 2
    min_age, namespaces = v
    # Lazy so --help stays fast: structlog.
    from worker.logs import configure

    configure(settings.logging.level, settings.logging.format)
    out = Output(args)
    try:
        return asyncio.run(_scan(args, settings, min_age, namespaces, out))
    except ConnectionError as e:
        print(f"ledger-deletion-worker scan: {e}", file=sys.stderr)
        return 1


ORPHAN_COLUMNS = (
    Column("LEDGER"),
    Column("TOPIC", shrink="middle", min_width=24, keep=1),
    Column("COMPONENT", shrink="end", min_width=14),
    Column("AGE", align="right"),
    Column("SIZE", align="right"),
    Column("WHY ORPHAN", shrink="end", min_width=16),
)
SENT_COLUMNS = (
    Column("LEDGER"),
    Column("TOPIC", shrink="middle", min_width=24, keep=1),
    Column("COMPONENT", shrink="end", min_width=14),
    Column("QUEUED AS MESSAGE", shrink="end", min_width=17),
)


def _component(d: Any) -> str:
    return (d.component or "") + (f" ({d.cursor})" if d.cursor else "")


def orphan_rows(decisions: Sequence[Any]) -> list[tuple[str, ...]]:
    """The orphans table's rows (``Decision``s of the scanner)."""
    return [
        (str(d.ledger_id), table_topic(d.topic or ""), _component(d), human_age(d.age_s), human_bytes(d.size), d.why)
        for d in decisions
    ]


async def _scan(
    args: argparse.Namespace, settings: Settings, min_age: float, namespaces: list[str], output: Output
) -> int:
    # Lazy so --help stays fast: the Pulsar client, aiohttp, kazoo and structlog.
    from worker.backends.bookie_http import BookieClient
    from worker.backends.http import new_session
    from worker.backends.ledger_listing import LedgerWalk
    from worker.backends.stores import optional_stores
    from worker.broker.admin import open_admin
    from worker.broker.preflight import check_bookies, prove_metadata_stores
    from worker.broker.snapshot_cache import snapshot_cache
    from worker.logs import get_logger
    from worker.operations.scanner import LISTING_TTL_S, Decision, LedgerChunks, LedgerListing, Scanner, Verdict

    log = get_logger(command="scan")
    s = settings
    progress = Progress()

    # One log line per decision when no progress bar shows (and the level keeps info lines).
    log_decisions = not progress.enabled and logging.getLevelName(s.logging.level.upper()) <= logging.INFO

    def on_decision(d: Decision) -> None:
        if log_decisions and d.verdict is not Verdict.NOT_PULSAR:
            log.info("ledger decision", **d.to_dict())

    async with (
        open_admin(s.pulsar) as admin,
        new_session(s.bookkeeper.request_timeout_s, limit=max(32, args.concurrency)) as bk_session,
        optional_stores(s.zookeeper) as zk,
    ):
        bookie = BookieClient(
            s.bookkeeper.endpoints,
            bk_session,
            zk.bookkeeper.ledger_metadata_exists if zk else None,
            registered_bookies=zk.bookkeeper.registered_bookies if zk else None,
        )
        if zk is not None:
            try:
                await prove_metadata_stores(zk, admin, TopicName.parse(s.topics.pending))
                await check_bookies(bookie, zk.bookkeeper)
            except StartupRefused as e:
                print(f"ledger-deletion-worker scan: {e}", file=sys.stderr)
                return 2
        listing: LedgerListing | LedgerChunks = bookie
        if (args.metadata_from or ("zookeeper" if zk else "bookie")) == "zookeeper":
            assert zk is not None
            listing = LedgerWalk(zk.bookkeeper)
        # Live states are read once per topic, after the whole listing: a snapshot is never reused from
        # the cache, and the namespaces' topic lists (the admin's half of "gone") are kept for the scan.
        snapshots = snapshot_cache(admin, s.worker, zk, ttl_s=0, not_found_ttl_s=LISTING_TTL_S)
        scanner = Scanner(
            listing,
            snapshots,
            zk.pulsar if zk else None,
            min_age_s=min_age,
            namespaces=namespaces,
            concurrency=args.concurrency,
            progress=progress.update,
            on_decision=on_decision,
            keep_all=args.full,
        )
        try:
            report = await scanner.scan()
        except BackendError as e:
            where = f"reading {zk.bookkeeper.where}: " if isinstance(listing, LedgerWalk) and zk else ""
            print(f"ledger-deletion-worker scan: {where}{e}", file=sys.stderr)
            return 1
        orphans = report.orphans
        out: dict[str, Any] = report.to_dict(full=args.full)
        out["dry_run"] = bool(args.dry_run)
        rc = 0
        if not args.dry_run:
            sent, failed = await _send(settings, admin, orphans, report.scan_id, output, progress)
            out["sent"] = sent
            out["send_failures"] = failed
            rc = 1 if failed else 0
        else:
            if orphans:
                output.table(ORPHAN_COLUMNS, orphan_rows(orphans))
            counts = report.counts()
            output.line(
                f"\n{len(orphans)} orphans among {report.listed} ledgers "
                f"(in use {counts['in_use']}, too young {counts['too_young']}, skipped {counts['skipped']}, "
                f"not Pulsar {counts['not_pulsar']}, other namespaces {report.filtered}); dry run: nothing sent"
            )
    output.hint()
    await asyncio.to_thread(output.report, out)
    return rc


async def _send(
    settings: Settings, admin: Any, orphans: list[Any], scan_id: str, output: Output, progress: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    # Lazy so --help stays fast: the Pulsar client.
    from worker.operations.phase1 import PendingDeleteSender, SendFailed

    sent: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    if not orphans:
        output.line("no orphans: nothing sent")
        return sent, failed
    rows: list[tuple[str, ...]] = []
    async with PendingDeleteSender(settings, admin=admin, source="scanner") as sender:
        for i, d in enumerate(orphans, 1):
            info = d.to_info({"source": "scanner", "scan_id": scan_id, "why": d.why})
            try:
                mid = await sender.send_pending_delete(info)
            except SendFailed as e:
                failed.append({"ledger_id": d.ledger_id, "error": str(e.cause)})
                rows.append((str(d.ledger_id), table_topic(d.topic), _component(d), f"FAILED: {e.cause}"))
            else:
                sent.append(
                    {"ledger_id": d.ledger_id, "topic": d.topic, "component": d.component, "message_id": str(mid)}
                )
                rows.append((str(d.ledger_id), table_topic(d.topic), _component(d), str(mid)))
            progress.update("send", i, len(orphans))
    output.table(SENT_COLUMNS, rows)
    output.line(f"\nqueued {len(sent)} of {len(orphans)} orphans for deletion ({len(failed)} failed)")
    return sent, failed
