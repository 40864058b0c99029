"""Storage and metadata-store clients (bookie HTTP, ZooKeeper, tiered storage): the side effects behind small async
clients. May import: worker.core, worker.formats, worker.errors, worker.settings, worker.metrics.
"""
