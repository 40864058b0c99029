"""The pace on the real stack: the worker's delete rate follows what ZooKeeper answers it.

ZooKeeper is made slow for the worker alone: the worker reaches it through a loopback proxy that holds every
answer back (``TcpProxy.delay_s``), which is what a ZooKeeper queueing writes looks like to its clients. The
worker deletes orphans on the ZooKeeper route (each delete a versioned write of BookKeeper's metadata) while
the answers are fast, then slow, then fast again: the rate it allows itself climbs, halves, and climbs back,
and every orphan is deleted in the end (nothing lost to the pacing)."""

from __future__ import annotations

import pytest

from testkit.harness import create_ledgers, ml_info, pulsar_ml_metadata
from testkit.topics import eventually
from tests.conftest import Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import TcpProxy
from worker.backends.zookeeper import ZooKeeper

pytestmark = pytest.mark.integration

ORPHANS = 300


async def test_the_delete_rate_halves_while_zookeeper_is_slow_and_recovers(
    stack: Stack, test_namespace: str, unique: str, make_worker: WorkerFactory
) -> None:
    gone_topic = f"persistent://{test_namespace}/paced-{unique}"
    ids = create_ledgers(stack, ORPHANS, pulsar_ml_metadata(gone_topic), entries=1)
    host, port = stack.zookeeper_hosts.split(":")
    proxy = TcpProxy(host, int(port))
    proxy.up()
    try:
        w = make_worker(
            f"paced-{unique}",
            zookeeper={"hosts": f"127.0.0.1:{proxy.port}"},
            bookkeeper={"delete_via": "zookeeper"},
            worker={
                "deletes_per_second": 40,
                "delete_burst": 1,
                "pace_interval_s": 0.5,
                "pace_floor_per_second": 1,
                # Above the noise of a ZooKeeper sharing two loaded cores with everything else (p90s up to about
                # 30 ms), far below the 300 ms delay injected (the idle p90 is a few milliseconds).
                "pace_latency_factor": 12,
                "max_inflight": 4,
            },
            start=False,
        )
        w.start(timeout=120)
        for lid in ids:
            w.send(ml_info(gone_topic, lid))

        def rate() -> float:
            return w.metric("ledger_deletion_pace_deletes_per_second")

        # Fast answers: the rate creeps up from a tenth of the ceiling (4/s), 2/s every interval.
        async def climbed() -> bool:
            return rate() >= 20

        await eventually(climbed, timeout=60, interval=0.2, what="the rate climbing while ZooKeeper is fast")
        peak = rate()
        halvings = w.metric("ledger_deletion_pace_decreases_total")

        proxy.delay_s = 0.3  # every answer 300 ms late

        async def halved() -> bool:
            return w.metric("ledger_deletion_pace_decreases_total") > halvings and rate() <= peak / 2

        await eventually(halved, timeout=30, interval=0.2, what="the rate halved while ZooKeeper is slow")
        slowed = rate()
        deleted_while_slow = w.metric("ledger_deletion_deleted_total", result="deleted")

        proxy.delay_s = 0.0

        async def recovered() -> bool:
            return rate() >= slowed + 6

        await eventually(recovered, timeout=60, interval=0.2, what="the rate climbing back once ZooKeeper is fast")

        async def drained() -> bool:
            return w.metric("ledger_deletion_deleted_total", result="deleted") >= ORPHANS

        await eventually(drained, timeout=240, interval=1, what="every orphan deleted")
        assert deleted_while_slow < ORPHANS, "the backlog was gone before ZooKeeper slowed: nothing was paced"
        async with ZooKeeper(stack.zookeeper_hosts) as zk:
            assert not [lid for lid in ids if await zk.bookkeeper.ledger_metadata_exists(lid)]
        assert w.metric("ledger_deletion_dlq_total") == 0
    finally:
        proxy.close()
