"""The nightly jobs on Spark: the ``pulsar`` data source, the DLQ replay and the cluster-scale audit.

They call the worker's own code (``worker.daemon.decider`` for the replay, ``worker.operations.scanner`` for the audit):
Spark only spreads it over executors. Needs the ``spark`` extra (PySpark 4, Java 17).
"""
