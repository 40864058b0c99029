"""``send``: queue one pending deletion by hand (phase 1 for a single ledger).

The worker re-checks everything before deleting (the owner's live set, the ledger's BookKeeper metadata
or the offloaded objects' metadata), so a wrong message is refused there; this command validates what it
can up front so that a typo fails here, with a message, instead of as a rejection in the worker's log.

Examples:
  ledger-deletion-worker send --topic persistent://public/default/t --ledger-id 42 --component MANAGED_LEDGER
  ledger-deletion-worker send --topic persistent://public/default/t --ledger-id 43 \\
      --component MANAGED_CURSOR --cursor my-sub
  ledger-deletion-worker send --topic persistent://public/default/t --ledger-id 7 \\
      --component SCHEMA_STORAGE --schema-id public/default/t
  ledger-deletion-worker send --topic persistent://public/default/t --ledger-id 12 --type OFFLOAD_LEDGER \\
      --offload-uuid 6f1c...-... --offload-driver aws-s3 --driver-metadata bucket=pulsar-offload \\
      --driver-metadata region=us-east-1
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid

from worker.commands.terminal import command_failed
from worker.formats.message import InvalidMessage, LedgerComponent, LedgerType, OffloadContext, PendingDeleteLedgerInfo
from worker.settings import Settings


def _enum_arg(enum_cls: type[LedgerComponent] | type[LedgerType]) -> object:
    def parse(text: str) -> object:
        norm = text.strip().upper().replace("-", "_")
        try:
            return enum_cls(norm)
        except ValueError:
            choices = ", ".join(e.value for e in enum_cls)
            raise argparse.ArgumentTypeError(f"{text!r}: choose one of {choices}") from None

    parse.__name__ = enum_cls.__name__
    return parse


def _ledger_id(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0 or v >= 2**63:
        raise argparse.ArgumentTypeError(f"{v} is not a valid ledger id (0 .. 2^63-1)")
    return v


def _kv(text: str) -> tuple[str, str]:
    k, sep, v = text.partition("=")
    if not sep or not k:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return k, v


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "send",
        help="queue one ledger for deletion by hand",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--topic", required=True, help="owning topic, persistent://tenant/ns/topic (partition name if any)")
    p.add_argument("--ledger-id", required=True, type=_ledger_id, help="the ledger id")
    p.add_argument(
        "--component",
        required=True,
        type=_enum_arg(LedgerComponent),  # type: ignore[arg-type]
        help="MANAGED_LEDGER | MANAGED_CURSOR | SCHEMA_STORAGE | COMPACTED_LEDGER | DELAYED_INDEX_BUCKET",
    )
    p.add_argument(
        "--type",
        dest="ledger_type",
        default=LedgerType.LEDGER,
        type=_enum_arg(LedgerType),  # type: ignore[arg-type]
        help="LEDGER (BookKeeper, default) | OFFLOAD_LEDGER (tiered storage copy)",
    )
    p.add_argument(
        "--cursor",
        help="MANAGED_CURSOR: the cursor's name (URL-encoded, as its ledger's pulsar/cursor);"
        " DELAYED_INDEX_BUCKET: the subscription's name (as its ledger's pulsar/delayedIndexCursor); required for both",
    )
    p.add_argument(
        "--schema-id",
        help="schema id tenant/ns/topic (the base topic's local name URL-encoded, as Pulsar keys it);"
        " required for SCHEMA_STORAGE",
    )
    p.add_argument("--offload-uuid", help="OFFLOAD_LEDGER: the offload attempt's uuid")
    p.add_argument("--offload-driver", help="OFFLOAD_LEDGER: offload driver name, e.g. aws-s3")
    p.add_argument(
        "--driver-metadata",
        action="append",
        type=_kv,
        default=[],
        metavar="KEY=VALUE",
        help="OFFLOAD_LEDGER: driver metadata entry (bucket, region, endpoint); repeatable",
    )
    p.add_argument("--property", action="append", type=_kv, default=[], metavar="KEY=VALUE", help="message property")
    p.set_defaults(handler=handle)
    return p


def build_info(args: argparse.Namespace) -> PendingDeleteLedgerInfo:
    """The message the arguments describe; InvalidMessage with a readable reason otherwise."""
    component: LedgerComponent = args.component
    ledger_type: LedgerType = args.ledger_type
    if args.cursor and component not in (LedgerComponent.MANAGED_CURSOR, LedgerComponent.DELAYED_INDEX_BUCKET):
        raise InvalidMessage("--cursor only goes with --component MANAGED_CURSOR or DELAYED_INDEX_BUCKET")
    if args.schema_id and component is not LedgerComponent.SCHEMA_STORAGE:
        raise InvalidMessage("--schema-id only goes with --component SCHEMA_STORAGE")
    offload = None
    if ledger_type is LedgerType.OFFLOAD_LEDGER:
        if not args.offload_uuid or not args.offload_driver:
            raise InvalidMessage("--type OFFLOAD_LEDGER needs --offload-uuid and --offload-driver")
        try:
            u = uuid.UUID(args.offload_uuid)
        except ValueError:
            raise InvalidMessage(f"--offload-uuid: {args.offload_uuid!r} is not a UUID") from None
        offload = OffloadContext.from_uuid(u, args.offload_driver, dict(args.driver_metadata))
    elif args.offload_uuid or args.offload_driver or args.driver_metadata:
        raise InvalidMessage("--offload-* and --driver-metadata only go with --type OFFLOAD_LEDGER")
    props = {"source": "send"}
    props.update(dict(args.property))
    info = PendingDeleteLedgerInfo(
        topic_name=args.topic,
        ledger_component=component,
        ledger_type=ledger_type,
        ledger_id=args.ledger_id,
        cursor_name=args.cursor,
        schema_id=args.schema_id,
        offload_context=offload,
        properties=props,
    )
    if component is LedgerComponent.SCHEMA_STORAGE:
        expected = info.topic.schema_name
        if args.schema_id != expected:
            # The worker rejects a schema id that is not its topic's: say so now.
            raise InvalidMessage(
                f"--schema-id must be the topic's schema id {expected!r}, got {args.schema_id!r}"
                " (Pulsar's schema id: tenant/namespace/topic of the partitioned base topic, the topic's"
                " local name URL-encoded)"
            )
    return info


def handle(args: argparse.Namespace, settings: Settings) -> int:
    try:
        info = build_info(args)
    except InvalidMessage as e:
        print(f"ledger-deletion-worker send: {e}", file=sys.stderr)
        return 2
    # Lazy so --help stays fast: structlog, aiohttp and the Pulsar client.
    from worker.logs import configure
    from worker.operations.phase1 import SendFailed, send_pending_delete

    configure(settings.logging.level, settings.logging.format)
    try:
        mid = asyncio.run(send_pending_delete(settings, info))
    except SendFailed as e:
        print(f"ledger-deletion-worker send: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # admin API or broker unreachable: one readable line, not a traceback
        return command_failed("send", e)
    delay = settings.worker.send_delay_s
    print(
        f"queued {info.ledger_type.value} {info.ledger_id} of {info.topic_name} ({info.ledger_component.value})"
        f" on {settings.topics.pending} as message {mid}; deliverable in {delay:g}s"
    )
    print(info.to_json())
    return 0
