"""The worker-subprocess harness lives in ``testkit.harness`` (the benchmark uses it too); these
names stay importable from here for the tests."""

from testkit.harness import WorkerHarness, create_ledgers, free_port, pulsar_ml_metadata

__all__ = ["WorkerHarness", "create_ledgers", "free_port", "pulsar_ml_metadata"]
