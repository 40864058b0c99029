"""The nightly jobs on Spark: the ``pulsar`` data source, the DLQ replay and the cluster-scale audit.

They call the worker's own code (``worker.decision`` for the replay, ``worker.scanner`` for the audit): the
rules live in one place, Spark only spreads them over executors. Needs the ``spark`` extra (PySpark 4).
"""

import os
import sys


def local_spark_environment() -> None:
    """Before a SparkSession starts in this process: its Python workers run this interpreter (the one
    with the worker package and its dependencies), and a local driver binds to loopback instead of the
    address the host name resolves to. Anything the operator set (spark-submit, the environment) wins."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
