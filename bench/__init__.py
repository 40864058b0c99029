"""Throughput benchmark of the phase-2 worker against the raw storage ceiling, on the real local stack.

``make bench`` (or ``.venv/bin/python -m bench``) measures, in one run and side by side:

- the real worker daemon (a subprocess, its own topics) draining a backlog of N pending deletions of real
  orphan ledgers (direct route: Pulsar managed-ledger metadata naming a topic that does not exist), with the
  rate limit out of the way, at ``max_inflight`` = 16 and = 1; optionally the owner route (ledgers a live
  topic dropped from its metadata) and the ``delete_via=zookeeper`` mode;
- the baseline: the same number of ledgers deleted straight through the bookie HTTP admin API by a plain
  sequential loop and by an asyncio loop with the same concurrency (the raw storage ceiling);
- the worker's peak RSS (``VmHWM``), CPU time, and per-message processing latency (its
  ``ledger_deletion_processing_seconds`` histogram).

Knobs (environment): ``BENCH_N`` (300), ``BENCH_CONCURRENCY`` (16), ``BENCH_OWNER_N`` (50; 0 skips the owner
route), ``BENCH_ZK`` (1; 0 skips the ZooKeeper-mode rows). Results: a table on stdout and
``bench/out/results.json``; worker logs under ``bench/out/``.

``bench.goals`` (also run by ``make bench``) measures issue 9's other goals, ``bench.bookies``
(``make bench-bookies``) the bookie HTTP route over one bookie and two on the cluster profile.
``bench.extension`` (``make bench-extension``) the broker extension's cost: a plain topic's produce/consume
figures and trims/s on stock brokers and on brokers with the extension, two stack instances of its own.
"""
