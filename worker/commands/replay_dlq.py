"""``replay-dlq``: the nightly DLQ replay, on Spark (``local[*]`` unless ``--master``).

Every dead letter the replay subscription has not acknowledged yet, read up to the DLQ's end at start, is
decided again by the worker's own decision core (decode, route, in use, verify, delete). Final outcomes
(deleted, already_gone, rejected, invalid) are acknowledged on ``topics.dlq_replay_subscription`` after the
Parquet report is written and read back whole (nothing is acknowledged otherwise): ``--report-dir`` must be
durable storage (a persistent volume, or an object store URI such as s3a://bucket/path). in_use, too_young
and still_failing stay for the next night. ``--dry-run`` decides and reports; it deletes and acknowledges
nothing. Secrets never travel to Spark's executors: the Pulsar token comes from ``pulsar.auth_token_file``
and the S3 keys from ``access_key_id_file``/``secret_access_key_file`` or the AWS credential chain, read by
each executor. Needs the ``spark`` extra (PySpark 4, Java 17).

Exit code: 0 when the run completed (whatever the outcomes), 1 when it failed, 2 on bad arguments or a
secret given inline.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from worker.commands.terminal import command_failed, positive_int
from worker.nightly import spark as nightly_spark
from worker.settings import Settings


def add_spark_options(p: argparse.ArgumentParser, subdir: str) -> None:
    p.add_argument("--master", default=None, help="Spark master URL (default: spark.master, else local[*])")
    p.add_argument("--report-dir", default=None, help=f"Parquet report root (default: nightly.report_dir + /{subdir})")
    p.add_argument(
        "--partitions", type=positive_int, default=None, help="Spark partitions to decide in (default 4 x parallelism)"
    )
    p.add_argument(
        "--pushgateway",
        default=None,
        metavar="HOST:PORT",
        help="push the run's metrics to this Prometheus Pushgateway (default: nightly.pushgateway_url)",
    )


def report_dir(arg: str | None, settings: Settings, subdir: str) -> str:
    """``<root>/<subdir>``: both jobs may be given the same root (the CronJobs are), and each keeps its own
    Parquet tables apart."""
    root = (arg or settings.nightly.report_dir).rstrip("/")
    path = f"{root}/{subdir}"
    return path if "://" in path else os.path.abspath(path)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "replay-dlq",
        help="decide every dead letter again, on Spark; acknowledge the settled ones",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--dry-run", action="store_true", help="decide and report; delete and acknowledge nothing")
    p.add_argument(
        "--concurrency",
        type=positive_int,
        default=None,
        help="decisions in flight per partition (default nightly.concurrency)",
    )
    add_spark_options(p, "replay")
    p.set_defaults(handler=handle)
    return p


def handle(args: argparse.Namespace, settings: Settings) -> int:
    # Lazy so --help stays fast: prometheus_client, aiohttp and aiobotocore.
    from worker.nightly import metrics as nm
    from worker.nightly.replay import ReplayOptions, replay

    if nightly_spark.inline_secrets(settings):
        # Refused before a JVM starts: the executors would need the secret shipped to them.
        print(
            f"ledger-deletion-worker replay-dlq: {nightly_spark.InlineSecret.__name__}: "
            f"{'; '.join(nightly_spark.inline_secrets(settings))}",
            file=sys.stderr,
        )
        return 2

    opts = ReplayOptions(
        report_dir=report_dir(args.report_dir, settings, "replay"),
        dry_run=args.dry_run,
        concurrency=args.concurrency or settings.nightly.concurrency,
        partitions=args.partitions,
    )
    gateway = args.pushgateway or settings.nightly.pushgateway_url
    t0 = time.monotonic()
    spark = None
    owned = False
    failed = True
    rows: dict[str, int] = {}
    freed: int | None = None
    try:
        owned = not nightly_spark.spark_running()
        spark = nightly_spark.session(args.master, "ledger-deletion-replay")
        summary = replay(spark, settings, opts)
        print(summary.table())
        rows = {nm_outcome(o): n for o, n in summary.rows.items()}
        freed = None if opts.dry_run else summary.freed_bytes
        failed = False
        return 0
    except Exception as e:
        return command_failed("replay-dlq", e)
    finally:
        if spark is not None and owned:
            spark.stop()
        if gateway:
            reg = nm.run_registry(
                failed=failed, duration_s=time.monotonic() - t0, rows=None if failed else rows, freed_bytes=freed
            )
            try:
                nm.push(gateway, nm.JOB_REPLAY, reg)
            except OSError as e:
                print(f"ledger-deletion-worker replay-dlq: push to {gateway} failed: {e}", file=sys.stderr)


def nm_outcome(outcome: str) -> str:
    """The report says still_failing; the shared metric contract (worker.nightly.metrics) says transient."""
    # Lazy so --help stays fast: the decision core (a dozen modules), aiohttp and aiobotocore.
    from worker.core.decision import Outcome
    from worker.nightly.replay import STILL_FAILING

    return Outcome.TRANSIENT.value if outcome == STILL_FAILING else outcome
