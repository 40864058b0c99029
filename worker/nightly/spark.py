"""One way to get a SparkSession for the nightly jobs, with the ``pulsar`` data source registered."""

from __future__ import annotations

import os
import sys
from typing import Any


def session(master: str | None = None, app_name: str = "ledger-deletion-worker", **conf: str) -> Any:
    """``master`` None: whatever ``spark-submit`` / ``spark.master`` says, else ``local[*]``."""
    # Executors must run this interpreter (the one with the worker package installed), not whatever
    # ``python3`` is first on PATH.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    if not os.environ.get("PYSPARK_GATEWAY_PORT") and (master is None or master.startswith("local")):
        # Launched from plain Python for a local run (spark-submit has started the JVM already otherwise):
        # bind the driver to loopback, not to whatever address the host name resolves to.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from worker.nightly.source import PulsarDataSource

    b = SparkSession.builder.appName(app_name)
    if master:
        b = b.master(master)
    # Otherwise no master is set here: spark-submit's (or spark.master's) wins, and a plain Python run gets
    # PySpark's own default, local[*].
    b = b.config("spark.ui.enabled", "false").config("spark.sql.session.timeZone", "UTC")
    for k, v in conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.dataSource.register(PulsarDataSource)
    return spark


def spark_running() -> bool:
    """A session already exists in this process (a notebook, a test): a command must not stop it."""
    from pyspark import SparkContext

    return SparkContext._active_spark_context is not None


def write_report(df: Any, path: str) -> Any:
    """Append ``df`` to the Parquet report at ``path`` (partitioned by ``run_date``) and return the report
    as a DataFrame of the same schema. A run with no rows writes no file; without the schema given,
    reading a root that holds none (the first run of an empty DLQ) fails to infer one."""
    df.write.mode("append").partitionBy("run_date").parquet(path)
    return df.sparkSession.read.schema(df.schema).parquet(path)
