"""``scan-offloaded``: Pulsar's own scan of a namespace's offload bucket, read the audit's way.

Calls the broker's ``GET /admin/v2/namespaces/{tenant}/{namespace}/scanOffloadedLedgers`` (Pulsar has no
command for it) and groups its objects per offload attempt (the data object and its ``-index``). The broker
lists the whole bucket of the namespace's offloader, whatever namespace owns each object, and judges each with
its own reads. Here each attempt also gets the verdict the nightly audit would give it
(``worker.core.offloaded_scan_status``): Pulsar's ``NOT-FOUND`` and ``BAD-UUID`` are orphans unless younger
than ``--min-age``. Nothing is deleted or queued: the audit (``audit``, which also tells a deleted topic from
a dropped ledger) queues what it finds with ``--send``.

Where it helps: the broker reads the bucket with its own credentials and its own offloader, so this works for
every offload driver Pulsar has (Google Cloud Storage, Azure, the filesystem, ...) and without S3 keys for the
worker, where the audit lists only the S3 targets configured in ``offload.s3_targets``. docs/nightly.md
compares the two.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections import defaultdict
from typing import Any

from worker.commands.scan import valid_namespace
from worker.commands.terminal import Column, Output, add_output_options, human_age, parse_duration, table_topic
from worker.core.freed_bytes import human_bytes
from worker.core.ledger_age import ledger_age
from worker.core.ledger_owner import topic_of_managed_ledger_name
from worker.core.offloaded_scan_status import audit_verdict
from worker.errors import BackendError
from worker.formats.offloaded_scan import ScanAnswerError, parse_offloaded_scan
from worker.formats.topic_name import InvalidTopicName
from worker.settings import Settings

COLUMNS = (
    Column("LEDGER"),
    Column("TOPIC", shrink="middle", min_width=24, keep=1),
    Column("OFFLOAD UUID", shrink="end", min_width=13),
    Column("BYTES", align="right"),
    Column("AGE", align="right"),
    Column("PULSAR SAYS"),
    Column("VERDICT"),
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "scan-offloaded",
        help="Pulsar's scan of a namespace's offload bucket (scanOffloadedLedgers), with the audit's verdicts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--namespace", "-n", required=True, metavar="TENANT/NS", help="whose offloader's bucket to scan")
    p.add_argument(
        "--min-age",
        default=None,
        metavar="DURATION",
        help="an attempt younger than this is never an orphan (default: worker.min_ledger_age_s)",
    )
    p.add_argument("--timeout", default="30m", metavar="DURATION", help="how long the broker may take (default 30m)")
    p.add_argument("--all", action="store_true", help="list every attempt, not only orphans and too-young ones")
    add_output_options(p)
    p.set_defaults(handler=handle)
    return p


def attempts(objects: list[dict[str, Any]], *, min_age_s: float, now_ms: float) -> list[dict[str, Any]]:
    """Pulsar's objects grouped per offload attempt (uuid, ledger), each with the audit's verdict. An attempt's
    status is its worst object's (an index object may be found where its data object is not)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = defaultdict(list)
    for o in objects:
        groups[(str(o.get("uuid") or ""), int(o.get("ledger", -1)))].append(o)
    rank = {"OK": 0, "NOT-OFFLOADED": 1, "UNKNOWN": 2, "BAD-UUID": 3, "NOT-FOUND": 4}
    out = []
    for (uuid, lid), objs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        status = max((str(o.get("status")) for o in objs), key=lambda s: rank.get(s, 5))
        modified = max(int(o.get("lastModified") or 0) for o in objs)
        old = ledger_age(modified, now_ms=now_ms, min_age_ms=min_age_s * 1000).old_enough
        verdict, orphan_class = audit_verdict(status, old_enough=old)
        out.append(
            {
                "ledger_id": lid,
                "uuid": uuid,
                "managed_ledger": next((o["managedLedgerName"] for o in objs if o.get("managedLedgerName")), None),
                "keys": sorted(str(o.get("name")) for o in objs),
                "bytes": sum(int(o.get("size") or 0) for o in objs),
                "last_modified_ms": modified,
                "pulsar_status": status,
                "verdict": verdict,
                "orphan_class": orphan_class,
            }
        )
    return out


def handle(args: argparse.Namespace, settings: Settings) -> int:
    try:
        min_age = settings.worker.min_ledger_age_s if args.min_age is None else parse_duration(args.min_age)
        timeout = parse_duration(args.timeout)
    except ValueError as e:
        print(f"ledger-deletion-worker scan-offloaded: {e}", file=sys.stderr)
        return 2
    if not valid_namespace(args.namespace):
        print(
            f"ledger-deletion-worker scan-offloaded: --namespace: expected tenant/namespace, got {args.namespace!r}",
            file=sys.stderr,
        )
        return 2
    out = Output(args)
    t0 = time.monotonic()
    try:
        text = asyncio.run(_scan(settings, args.namespace, timeout))
        scan = parse_offloaded_scan(text)
    except (BackendError, ScanAnswerError) as e:
        print(f"ledger-deletion-worker scan-offloaded: {e}", file=sys.stderr)
        return 1
    took = time.monotonic() - t0
    found = attempts(scan.objects, min_age_s=min_age, now_ms=time.time() * 1000)
    for a in found:
        try:
            a["topic"] = str(topic_of_managed_ledger_name(a["managed_ledger"])) if a["managed_ledger"] else None
        except InvalidTopicName:
            a["topic"] = None
    shown = found if args.all else [a for a in found if a["verdict"] in ("orphan", "too_young")]
    rows = [
        (
            str(a["ledger_id"]),
            table_topic(a["topic"]) if a["topic"] else f"<{a['managed_ledger'] or 'no ManagedLedgerName'}>",
            a["uuid"],
            human_bytes(a["bytes"]),
            human_age(time.time() - a["last_modified_ms"] / 1000) if a["last_modified_ms"] else "?",
            a["pulsar_status"],
            a["verdict"] + (f" ({a['orphan_class']})" if a["orphan_class"] else ""),
        )
        for a in shown
    ]
    if rows:
        out.table(COLUMNS, rows)
    orphans = [a for a in found if a["verdict"] == "orphan"]
    counts: dict[str, int] = defaultdict(int)
    for a in found:
        counts[a["verdict"]] += 1
    out.line(
        f"\n{len(found)} offload attempts ({scan.total} objects) in the bucket of {args.namespace}'s offloader, "
        f"scanned by the broker in {took:.1f} s: "
        + ", ".join(f"{k} {counts[k]}" for k in ("orphan", "too_young", "in_use", "skipped"))
        + f"; orphan bytes {human_bytes(sum(a['bytes'] for a in orphans))}"
    )
    out.hint()
    out.report(
        {
            "namespace": args.namespace,
            "seconds": round(took, 3),
            "objects": scan.total,
            "pulsar_counts": {"errors": scan.errors, "unknown": scan.unknown},
            "attempts": found,
        }
    )
    return 0


async def _scan(settings: Settings, namespace: str, timeout_s: float) -> str:
    # Lazy so --help stays fast: aiohttp.
    from worker.broker.admin import open_admin

    pulsar = settings.pulsar.model_copy(update={"request_timeout_s": timeout_s})
    async with open_admin(pulsar) as admin:
        return await admin.scan_offloaded_ledgers(namespace)
