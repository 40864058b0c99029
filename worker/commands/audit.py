"""``audit``: the orphan scanner's anti-join at cluster scale, on Spark (``local[*]`` unless ``--master``).

BookKeeper: every ledger's metadata read from the metadata store (``/ledgers``, split by subtree),
judged by the scanner's own rules: the same verdicts as ``scan --dry-run``. Offload buckets: every
``{uuid}-ledger-{id}[-index]`` object set of the configured S3 targets whose topic is gone, whose ledger
is gone, or whose uuid the topic does not record. Parquet report under ``--report-dir`` (``ledgers/`` and
``objects/``, partitioned by run date) and a summary (count and bytes per orphan class and namespace).
``--send`` queues the orphans through phase 1: ledgers as LEDGER, object sets as OFFLOAD_LEDGER pending
deletions; the worker re-checks everything before it deletes.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid

from worker.commands.replay_dlq import add_spark_options, report_dir
from worker.commands.scan import _validate
from worker.commands.terminal import command_failed
from worker.nightly import spark as nightly_spark
from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "audit",
        help="find orphaned ledgers and offloaded objects at cluster scale, on Spark (--send to queue them)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--send", action="store_true", help="queue the orphans as pending deletions (phase 1)")
    p.add_argument(
        "--namespace",
        "-n",
        action="append",
        default=[],
        metavar="TENANT/NS",
        help="only ledgers of topics in this namespace; repeatable",
    )
    p.add_argument(
        "--min-age",
        default=None,
        metavar="DURATION",
        help="ignore ledgers/objects younger than this (default: worker.min_ledger_age_s)",
    )
    p.add_argument("--no-buckets", action="store_true", help="skip the offload bucket audit")
    p.add_argument(
        "--ledgers-root",
        default=None,
        help="BookKeeper's ledgers root on its store's servers (default: zookeeper.metadata_service_uri's)",
    )
    add_spark_options(p, "audit")
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    v = _validate(argparse.Namespace(min_age=args.min_age, namespace=args.namespace, concurrency=1), settings)
    if isinstance(v, str):
        print(f"ledger-deletion-worker audit: {v}", file=sys.stderr)
        return 2
    min_age, namespaces = v
    # Lazy so --help stays fast: prometheus_client, aiohttp, kazoo and aiobotocore.
    from worker.nightly import metrics as nm
    from worker.nightly.audit import run_audit

    if nightly_spark.inline_secrets(settings):
        # Refused before a JVM starts: the executors would need the secret shipped to them.
        print(
            f"ledger-deletion-worker audit: {nightly_spark.InlineSecret.__name__}: "
            f"{'; '.join(nightly_spark.inline_secrets(settings))}",
            file=sys.stderr,
        )
        return 2

    gateway = args.pushgateway or settings.nightly.pushgateway_url
    reports = report_dir(args.report_dir, settings, "audit")
    t0 = time.monotonic()
    spark = None
    owned = False
    failed = True
    summary = None
    try:
        owned = not nightly_spark.spark_running()
        spark = nightly_spark.session(args.master, "ledger-deletion-audit")
        run_id = uuid.uuid4().hex[:12]
        summary = run_audit(
            spark,
            settings,
            report_dir=reports,
            run_id=run_id,
            min_age_s=min_age,
            namespaces=namespaces,
            buckets=not args.no_buckets,
            ledgers_root=args.ledgers_root,
            partitions=args.partitions,
        )
        print(summary.table())
        rc = 0
        if args.send:
            # Lazy so --help stays fast: aiohttp and kazoo.
            from worker.nightly.send import orphan_infos, send_orphans

            # No orphan row was written when there is none: nothing to read back.
            infos = orphan_infos(spark, settings, reports, run_id) if summary.orphans else []
            sent, failures = asyncio.run(send_orphans(settings, infos))
            print(f"\nqueued {sent} orphans for deletion ({failures} failed)")
            rc = 1 if failures else 0
        failed = False
        return rc
    except Exception as e:
        return command_failed("audit", e)
    finally:
        if spark is not None and owned:
            spark.stop()
        if gateway:
            rows: dict[str, int] | None = None
            if summary and not failed:
                # The shared contract's audit outcomes: orphan, in_use, skipped (every other verdict).
                rows = {o: 0 for o in nm.AUDIT_OUTCOMES}
                for verdict, n in summary.ledgers.items():
                    key = verdict if verdict in nm.AUDIT_OUTCOMES else "skipped"
                    rows[key] += n
            by_class = summary.by_class() if summary and not failed else None
            held = summary.held_past_retention if summary and not failed else None
            reg = nm.run_registry(
                failed=failed,
                duration_s=time.monotonic() - t0,
                rows=rows,
                orphans=by_class,
                held_past_retention_bytes=held[2] if held is not None else None,
            )
            try:
                nm.push(gateway, nm.JOB_AUDIT, reg)
            except OSError as e:
                print(f"ledger-deletion-worker audit: push to {gateway} failed: {e}", file=sys.stderr)
