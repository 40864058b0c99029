"""``trim-idle``: reclaim the ledgers of idle topics that are past their retention.

A broker trims a topic's ledgers only while it has the topic loaded, so a topic nobody loads keeps every ledger
it lists, past its retention or not (PIP-219). Those ledgers are no orphans (their topic lists them): ``scan``
and the worker keep them. This command finds them without loading any topic (Pulsar's metadata store, the
broker's own trim rule on the effective retention: the topic's policy, else its namespace's, else the broker
default) and, with ``--apply``, asks the broker to trim each topic (the admin API's ``trim``), at a bounded rate,
recording each topic done in a state file so that a rerun skips it.

A trim loads the topic, and a loaded topic's message TTL (its own, else its namespace's, else the broker
default) acknowledges every unacknowledged entry older than the TTL within minutes; the next trim then drops
them. The dry run reports each topic's effective TTL and the backlog a load would expire; ``--apply`` holds back
every topic whose load may expire some, unless ``--allow-ttl-expiry``.

Output: for a person, a table sized to the terminal and a summary; ``--output json`` (``--json``) prints only the
JSON report instead, ``--report FILE`` also writes it to FILE. Exit code 1 if a trim failed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from worker.commands.scan import valid_namespace
from worker.commands.terminal import Column, Output, Progress, add_output_options, table_topic
from worker.core.freed_bytes import human_bytes
from worker.core.retention import Retention
from worker.errors import BackendError, StartupRefused
from worker.formats.topic_name import TopicName
from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "trim-idle",
        help="find idle topics holding ledgers past their retention (and ask the broker to trim them with --apply)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="TENANT/NS",
        help="only topics of this namespace (tenant/namespace, or tenant/cluster/namespace); repeatable; default all",
    )
    p.add_argument("--apply", action="store_true", help="ask the broker to trim each topic found (default: dry run)")
    p.add_argument(
        "--state",
        metavar="FILE",
        help="with --apply: the topics done, appended as each is trimmed; "
        "a rerun with the same file skips them (required with --apply)",
    )
    p.add_argument(
        "--allow-ttl-expiry",
        action="store_true",
        help="with --apply: also trim the topics whose load would let their message TTL expire unacknowledged "
        "backlog (default: they are held back, untouched)",
    )
    p.add_argument(
        "--rate", type=float, default=1.0, help="with --apply: topics trimmed per second at most (default 1)"
    )
    p.add_argument(
        "--concurrency",
        type=int,
        default=2,
        help="with --apply: trims at once (default 2); the dry run reads 16 topics at once",
    )
    p.add_argument(
        "--default-retention",
        metavar="MINUTES,MB",
        help="the brokers' defaultRetentionTimeInMinutes,defaultRetentionSizeInMB (-1 infinite: write "
        "--default-retention=-1,-1); default: read from the broker's runtime configuration (a superuser's read)",
    )
    p.add_argument(
        "--default-ttl",
        metavar="SECONDS",
        type=int,
        help="the brokers' ttlDurationDefaultInSeconds (0: no TTL); default: read from the broker's runtime "
        "configuration (a superuser's read)",
    )
    add_output_options(p)
    p.set_defaults(handler=handle)
    return p


def _parse_retention(text: str) -> tuple[int, int]:
    parts = text.split(",")
    if len(parts) != 2:
        raise ValueError(f"expected MINUTES,MB, got {text!r}")
    minutes, mb = (int(x) for x in parts)
    if minutes < -1 or mb < -1:
        raise ValueError(f"-1 is infinite, anything lower is not a retention: {text!r}")
    return minutes, mb


def handle(args: argparse.Namespace, settings: Settings) -> int:
    def refuse(why: str) -> int:
        print(f"ledger-deletion-worker trim-idle: {why}", file=sys.stderr)
        return 2

    for ns in args.namespace:
        if not valid_namespace(ns, v1=True):
            return refuse(f"--namespace: expected tenant/namespace (or tenant/cluster/namespace), got {ns!r}")
    if args.apply and not args.state:
        return refuse("--apply needs --state FILE (the topics done, so that a rerun skips them)")
    if args.allow_ttl_expiry and not args.apply:
        return refuse("--allow-ttl-expiry goes with --apply (a dry run trims nothing)")
    if args.default_ttl is not None and args.default_ttl < 0:
        return refuse(f"--default-ttl: seconds, 0 for none, got {args.default_ttl}")
    if not args.rate > 0 or not 1 <= args.concurrency <= 64:
        return refuse("--rate must be > 0 and --concurrency between 1 and 64")
    default: tuple[int, int] | None = None
    if args.default_retention:
        try:
            default = _parse_retention(args.default_retention)
        except ValueError as e:
            return refuse(f"--default-retention: {e}")
    if not settings.zookeeper.metadata_store_url:
        return refuse(
            "zookeeper.metadata_store_url is not set: an idle topic's ledgers and cursors are read from Pulsar's "
            "metadata store, never by loading the topic"
        )
    # Lazy so --help stays fast: structlog.
    from worker.logs import configure

    configure(settings.logging.level, settings.logging.format)
    try:
        return asyncio.run(_run(args, settings, default, Output(args)))
    except ConnectionError as e:
        print(f"ledger-deletion-worker trim-idle: {e}", file=sys.stderr)
        return 1


FOUND_COLUMNS = (
    Column("TOPIC", shrink="middle", min_width=24, keep=1),
    Column("LEDGERS", align="right"),
    Column("PAST RETENTION", align="right"),
    Column("OF", align="right"),
    Column("RETENTION", shrink="end", min_width=12),
    # Left out before RETENTION on a narrow terminal: the summary still says which topics --apply holds back.
    Column("TTL EXPIRY", shrink="end", min_width=12, optional=True),
    Column("KEPT BECAUSE", shrink="end", min_width=16, optional=True),
)
TRIMMED_COLUMNS = (
    Column("TOPIC", shrink="middle", min_width=24, keep=1),
    Column("DROPPED", align="right"),
    Column("BEFORE", align="right"),
    Column("AFTER", align="right"),
    Column("RESULT", shrink="end", min_width=12),
)


def ttl_cell(t: Any) -> str:
    """The backlog entries a load expires and the TTL: ``15 (10 s, namespace)``, ``10-15``, ``15+?``,
    ``0 (none, broker)``; ``? (topic TTL unread)`` when a TTL the topic may set itself could expire some."""
    if t.ttl_risk is not None and not t.expiry.at_risk:
        return "? (topic TTL unread)"
    unread = ", topic TTL unread" if t.topic_policy_unread else ""
    return f"{t.expiry.count()} ({t.ttl}{unread})"


def found_rows(topics: list[Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for t in topics:
        source = t.retention.source + (" (topic policy unread)" if t.topic_policy_unread else "")
        rows.append(
            (
                table_topic(str(t.topic)),
                f"{len(t.past.ledgers)}/{t.ledgers}",
                human_bytes(t.past.size),
                human_bytes(t.size),
                f"{t.retention.retention} ({source})",
                ttl_cell(t),
                t.past.kept_because,
            )
        )
    return rows


async def _run(args: argparse.Namespace, settings: Settings, default: tuple[int, int] | None, output: Output) -> int:
    # Lazy so --help stays fast: the Pulsar client, aiohttp and kazoo.
    from worker.backends.stores import optional_stores
    from worker.broker.admin import open_admin
    from worker.broker.preflight import prove_metadata_stores
    from worker.operations.idle_trim import TrimState, apply_trims, find_idle_past_retention

    s = settings
    progress = Progress()
    async with open_admin(s.pulsar) as admin, optional_stores(s.zookeeper) as zk:
        assert zk is not None
        try:
            await prove_metadata_stores(zk, admin, TopicName.parse(s.topics.pending))
        except StartupRefused as e:
            print(f"ledger-deletion-worker trim-idle: {e}", file=sys.stderr)
            return 2
        try:
            found = await find_idle_past_retention(
                s,
                zk,
                namespaces=args.namespace,
                broker_default=Retention(*default) if default is not None else None,
                broker_default_ttl=args.default_ttl,
                progress=progress.update,
            )
        except BackendError as e:
            hint = ""
            if "default retention" in str(e):
                hint = " (give it with --default-retention MINUTES,MB)"
            elif "default message TTL" in str(e):
                hint = " (give it with --default-ttl SECONDS)"
            print(f"ledger-deletion-worker trim-idle: {e}{hint}", file=sys.stderr)
            return 1
        metadata = zk.pulsar
        out: dict[str, Any] = found.to_dict()
        out["dry_run"] = not args.apply
        risky = found.ttl_risk
        if found.past:
            output.table(FOUND_COLUMNS, found_rows(found.past))
        output.line(
            f"\n{len(found.past)} idle topics hold {human_bytes(found.size)} ({found.size} bytes) in "
            f"{found.ledgers} ledgers past their retention (idle topics read {found.read}, within retention "
            f"{len(found.within)}, loaded {len(found.loaded)}: their brokers trim them, skipped {len(found.skipped)})"
            + ("" if args.apply else "; dry run: nothing trimmed")
        )
        if risky:
            counted = [t for t in risky if t.expiry.at_risk]
            what = []
            if counted:
                n = sum(t.expiry.at_most for t in counted)
                more = " and uncounted ones" if any(t.expiry.uncounted for t in counted) else ""
                what.append(f"{len(counted)} would lose up to {n} unacknowledged entries{more} to their message TTL")
            if len(counted) < len(risky):
                what.append(
                    f"{len(risky) - len(counted)} hold unacknowledged entries and a message TTL of their own not read"
                )
            output.line(
                f"once a trim loads them, {' and '.join(what)}: "
                + (
                    "--allow-ttl-expiry trims them anyway"
                    if args.allow_ttl_expiry
                    else "--apply holds them back unless --allow-ttl-expiry"
                )
            )
        for ns, why in sorted(found.unread_policies.items()):
            output.line(
                f"topic-level retention and message TTL of {ns} not read ({why}): its topics are judged by their "
                "namespace's, and --apply holds back those with unacknowledged backlog"
            )
        for sk in found.skipped:
            output.line(f"skipped {sk['topic']}: {sk['why']}")
        rc = 0
        if args.apply:
            state = TrimState(Path(args.state))
            done = 0

            def on_done(_: Any) -> None:
                nonlocal done
                done += 1
                progress.update("trim", done, len(found.past))

            trimmed, already, held_back = await apply_trims(
                admin,
                metadata,
                found.past,
                state,
                rate=args.rate,
                concurrency=args.concurrency,
                allow_ttl_expiry=args.allow_ttl_expiry,
                on_done=on_done,
            )
            failed = [t for t in trimmed if t.error]
            at_risk = {str(t.topic) for t in risky}
            rows = [
                (
                    table_topic(t.topic),
                    str(len(t.dropped)),
                    human_bytes(t.bytes_before),
                    human_bytes(t.bytes_after),
                    t.error or ("trimmed, its TTL may expire backlog" if t.topic in at_risk else "trimmed"),
                )
                for t in trimmed
            ]
            if rows:
                output.line()
                output.table(TRIMMED_COLUMNS, rows)
            before = sum(t.bytes_before for t in trimmed)
            after = sum(t.bytes_after for t in trimmed)
            for h in held_back:
                output.line(f"held back {h.topic}: {h.ttl_risk}; --allow-ttl-expiry trims it anyway")
            output.line(
                f"\ntrimmed {len(trimmed) - len(failed)} of {len(found.past)} topics ({len(failed)} failed, "
                f"{len(already)} already done per {args.state}, {len(held_back)} held back"
                + (" lest their message TTL expire backlog" if held_back else "")
                + f"): {sum(len(t.dropped) for t in trimmed)} ledgers "
                f"dropped, {human_bytes(before)} ({before} bytes) before, {human_bytes(after)} ({after} bytes) after"
            )
            out["trimmed"] = [t.to_dict() for t in trimmed]
            out["already_done"] = already
            out["held_by_ttl"] = [{"topic": str(h.topic), "why": h.ttl_risk} for h in held_back]
            out["allow_ttl_expiry"] = args.allow_ttl_expiry
            out["bytes_before"] = before
            out["bytes_after"] = after
            rc = 1 if failed else 0
    output.hint()
    await asyncio.to_thread(output.report, out)
    return rc
