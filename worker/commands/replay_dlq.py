"""``replay-dlq``: the nightly DLQ replay, on Spark (``local[*]`` unless ``--master``).

Every dead letter the replay subscription has not acknowledged yet, read up to the DLQ's end at start, is
decided again by the worker's own decision core (decode, route, in use, verify, delete). Final outcomes
(deleted, already_gone, rejected, invalid) are acknowledged on ``topics.dlq_replay_subscription`` after the
Parquet report is written; in_use, too_young and still_failing stay for the next night. ``--dry-run``
decides and reports; it deletes and acknowledges nothing. Needs the ``spark`` extra (PySpark 4, Java 17).

Exit code: 0 when the run completed (whatever the outcomes), 1 when it failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from worker.settings import Settings

PUSHGATEWAY_ENV = "LDW_PUSHGATEWAY"


def add_spark_options(p: argparse.ArgumentParser, report_default: str) -> None:
    p.add_argument("--master", default=None, help="Spark master URL (default: spark.master, else local[*])")
    p.add_argument("--report-dir", default=report_default, help=f"Parquet report root (default {report_default})")
    p.add_argument("--partitions", type=int, default=None, help="Spark partitions (default: default parallelism)")
    p.add_argument(
        "--pushgateway",
        default=os.environ.get(PUSHGATEWAY_ENV),
        metavar="HOST:PORT",
        help=f"push the run's metrics to this Prometheus Pushgateway (default ${PUSHGATEWAY_ENV})",
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "replay-dlq",
        help="decide every dead letter again, on Spark; acknowledge the settled ones",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dry-run", action="store_true", help="decide and report; delete and acknowledge nothing")
    p.add_argument("--concurrency", type=int, default=None, help="decisions in flight per partition")
    add_spark_options(p, "nightly-reports/replay")
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    if args.concurrency is not None and args.concurrency < 1:
        print("ledger-deletion-worker replay-dlq: --concurrency must be >= 1", file=sys.stderr)
        return 2
    if args.partitions is not None and args.partitions < 1:
        print("ledger-deletion-worker replay-dlq: --partitions must be >= 1", file=sys.stderr)
        return 2
    from worker import nightly_metrics as nm
    from worker.nightly.replay import ReplayOptions, replay
    from worker.nightly.spark import session

    opts = ReplayOptions(
        report_dir=os.path.abspath(args.report_dir),
        dry_run=args.dry_run,
        concurrency=args.concurrency,
        partitions=args.partitions,
    )
    t0 = time.monotonic()
    spark = None
    failed = True
    rows: dict[str, int] = {}
    try:
        spark = session(args.master, "ledger-deletion-replay")
        summary = replay(spark, settings, opts)
        print(summary.table())
        rows = {nm_outcome(o): n for o, n in summary.rows.items()}
        failed = False
        return 0
    except Exception as e:
        print(f"ledger-deletion-worker replay-dlq: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        if spark is not None:
            spark.stop()
        if args.pushgateway:
            reg = nm.run_registry(failed=failed, duration_s=time.monotonic() - t0, rows=None if failed else rows)
            try:
                nm.push(args.pushgateway, nm.JOB_REPLAY, reg)
            except OSError as e:
                print(f"ledger-deletion-worker replay-dlq: push to {args.pushgateway} failed: {e}", file=sys.stderr)


def nm_outcome(outcome: str) -> str:
    """The report says still_failing; the shared metric contract (worker.nightly_metrics) says transient."""
    return "transient" if outcome == "still_failing" else outcome
