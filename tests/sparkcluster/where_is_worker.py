"""A spark-submit app for tests/sparkcluster: where the driver and each executor import ``worker`` from,
with which Python and in which working directory. Prints one line ``LDW-WHERE {json}``."""

import json
import os
import sys
import time
from typing import Any

from pyspark.sql import SparkSession

import worker

spark = SparkSession.builder.appName("ldw-where-is-worker").getOrCreate()
sc = spark.sparkContext
# Both executors registered (the driver counts as one more), so the tasks spread over both workers.
deadline = time.monotonic() + 120
while sc._jsc.sc().getExecutorMemoryStatus().size() < 3 and time.monotonic() < deadline:
    time.sleep(0.5)


def probe(_: Any) -> Any:
    import worker as w

    time.sleep(1)  # long enough for the other executor to take a task too
    return [{"worker": w.__file__, "cwd": os.getcwd(), "python": sys.executable, "pid": os.getpid()}]


executors = sc.parallelize(range(8), 8).mapPartitions(probe).collect()
print("LDW-WHERE " + json.dumps({"driver": worker.__file__, "driver_python": sys.executable, "executors": executors}))
spark.stop()
