"""``replay-dlq``: the nightly DLQ replay on Spark (``local[*]`` unless ``--master`` or spark-submit says
otherwise). Every dead letter is re-decided by the worker's own decision core; a Parquet report is
written; then exactly the messages whose ledger reached a final outcome (deleted, already gone, rejected)
are acknowledged on the replay subscription. ``--dry-run`` decides and reports, deletes and acknowledges
nothing. Under spark-submit: ``spark-submit .../worker/cli.py replay-dlq --config worker.yaml``.
"""

from __future__ import annotations

import argparse
import sys

from worker.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser("replay-dlq", help="replay the dead-letter topic on Spark (nightly job)", description=__doc__)
    add_spark_arguments(p)
    p.add_argument("--dry-run", action="store_true", help="decide and report; delete and acknowledge nothing")
    p.set_defaults(handler=handle)
    return p


def add_spark_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--master", default=None, help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--report-dir", default=None, help="Parquet report directory (default: nightly.report_dir)")
    p.add_argument("--partitions", type=int, default=None, help="decision partitions (default: Spark parallelism)")
    p.add_argument("--pushgateway", default=None, help="Pushgateway host:port (default: nightly.pushgateway_url)")


def spark_session(app: str, master: str | None) -> object:
    from worker.nightly import local_spark_environment

    local_spark_environment()
    from pyspark.sql import SparkSession

    b = SparkSession.builder.appName(app).config("spark.sql.session.timeZone", "UTC")
    if master:
        b = b.master(master)
    return b.getOrCreate()


def handle(args: argparse.Namespace, settings: Settings) -> int:
    from worker import nightly_metrics as nm
    from worker.nightly.replay import ReplayOptions, render_summary, replay

    if args.partitions is not None and args.partitions < 1:
        print("ledger-deletion-worker replay-dlq: --partitions must be >= 1", file=sys.stderr)
        return 2
    opts = ReplayOptions(
        report_dir=f"{(args.report_dir or settings.nightly.report_dir).rstrip('/')}/replay",
        dry_run=args.dry_run,
        concurrency=settings.nightly.concurrency,
        partitions=args.partitions,
    )
    gateway = args.pushgateway or settings.nightly.pushgateway_url
    spark = spark_session("ledger-deletion-replay-dlq", args.master)
    import time

    t0 = time.monotonic()
    try:
        summary = replay(spark, settings, opts)
    except Exception as e:
        if gateway and not args.dry_run:
            nm.push(gateway, nm.JOB_REPLAY, nm.run_registry(failed=True, duration_s=time.monotonic() - t0))
        print(f"ledger-deletion-worker replay-dlq: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        spark.stop()  # type: ignore[attr-defined]
    print(render_summary(summary))
    import json

    print(json.dumps(summary, sort_keys=True))
    if gateway and not args.dry_run:
        registry = nm.run_registry(failed=False, duration_s=summary["duration_s"], rows=summary["ledgers"])
        nm.push(gateway, nm.JOB_REPLAY, registry)
    return 0
