"""A bookie HTTP endpoint of another BookKeeper cluster: real bookies of both profiles of the local stack.

The standalone stack's embedded bookie registers as ``bk0test`` in its ZooKeeper; the cluster profile's
bookies as ``127.0.0.1:<bookie port>`` (3182 and 3183 on 4.0.8's ports) in theirs. Ledger
ids overlap between clusters, and any bookie reads and deletes ledgers of its own cluster by id: a
standalone worker configured with a cluster bookie's URL used to start and spread its reads and deletes
over it. It now refuses to start naming the URL, and a client never sends a call to an endpoint it has
not proven to be a bookie of its own cluster."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from testkit.harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from tests.cluster.conftest import Cluster
from tests.conftest import Stack
from worker.backends.bookie_http import BookieClient, BookieNotInCluster
from worker.backends.http import new_session
from worker.backends.stores import Stores


def test_a_bookie_of_another_cluster_refuses_to_start(
    stack: Stack, cluster: Cluster, unique: str, tmp_path: Path, harnesses: list[WorkerHarness]
) -> None:
    foreign = cluster.bookie_http_url.rstrip("/")
    h = WorkerHarness(stack, tmp_path, f"foreign-bookie-{unique}", bookkeeper={"http_urls": [foreign]})
    harnesses.append(h)
    try:
        h.start(timeout=120)
    except AssertionError:
        assert h.proc is not None and h.proc.returncode == 2, h.log_tail()
    else:
        pytest.fail(f"the worker started with the other cluster's bookie {foreign} in bookkeeper.http_urls")
    log = h.log_text()
    assert f"bookkeeper.http_url/http_urls {foreign}: not a bookie of the BookKeeper cluster" in log, log[-3000:]
    assert f"its bookie id '{cluster.bookie_id}' is not registered" in log, log[-3000:]


async def test_each_clusters_bookies_belong_to_it_and_to_no_other(stack: Stack, cluster: Cluster) -> None:
    async with (
        new_session(30) as s,
        Stores(f"zk:{stack.zookeeper_hosts}") as standalone,
        Stores(f"zk:{cluster.zookeeper_hosts}") as other,
    ):
        # Ids from bookieId (the standalone's) and from advertisedAddress:bookiePort (the cluster's).
        await BookieClient(
            stack.bookie_http_url, s, registered_bookies=standalone.bookkeeper.registered_bookies
        ).verify_endpoints()
        both = [cluster.bookie_http_url, cluster.bookie_http_url_2]
        await BookieClient(both, s, registered_bookies=other.bookkeeper.registered_bookies).verify_endpoints()
        with pytest.raises(BookieNotInCluster, match=f"'{re.escape(cluster.bookie_id)}' is not registered"):
            await BookieClient(both, s, registered_bookies=standalone.bookkeeper.registered_bookies).verify_endpoints()
        with pytest.raises(BookieNotInCluster, match="'bk0test' is not registered"):
            await BookieClient(
                stack.bookie_http_url, s, registered_bookies=other.bookkeeper.registered_bookies
            ).verify_endpoints()


async def test_a_foreign_bookie_never_serves_a_call(stack: Stack, cluster: Cluster, unique: str) -> None:
    """Not verified at start (as a bookie that was down then): proven foreign before its first call, left
    out, and the call served by the bookie of our cluster."""
    topic = f"persistent://public/default/foreign-{unique}"
    ids = create_ledgers(stack, 2, pulsar_ml_metadata(topic))
    foreign, real = cluster.bookie_http_url.rstrip("/"), stack.bookie_http_url.rstrip("/")
    calls: Counter[tuple[str, str, str]] = Counter()
    async with new_session(30) as s, Stores(f"zk:{stack.zookeeper_hosts}") as zk:
        bookie = BookieClient(
            [foreign, real],  # the foreign one first: with nothing in flight it is the first choice
            s,
            zk.bookkeeper.ledger_metadata_exists,
            down_s=60,
            on_request=lambda url, op, outcome: calls.update([(url, op, outcome)]),
            registered_bookies=zk.bookkeeper.registered_bookies,
        )
        for lid in ids:
            md = await bookie.get_metadata(lid)
            assert md is not None and md.custom_metadata["pulsar/managed-ledger"].endswith(f"foreign-{unique}")
        for lid in ids:
            assert await bookie.delete_ledger(lid) is True
        for lid in ids:
            assert not await zk.bookkeeper.ledger_metadata_exists(lid)
    assert calls[(foreign, "identify", "foreign")] == 1
    assert {op for (url, op, _) in calls if url == foreign} == {"identify"}
    assert calls[(real, "read", "200")] == len(ids) and calls[(real, "delete", "200")] == len(ids)


async def test_a_foreign_bookie_is_never_asked_to_collect(stack: Stack, cluster: Cluster) -> None:
    """bookkeeper.gc_trigger_bytes: the garbage collection request goes to proven bookies only."""
    calls: list[tuple[str, str, str]] = []
    async with new_session(30) as s, Stores(f"zk:{cluster.zookeeper_hosts}") as other:
        client = BookieClient(
            [cluster.bookie_http_url, stack.bookie_http_url],
            s,
            registered_bookies=other.bookkeeper.registered_bookies,
            on_request=lambda url, op, outcome: calls.append((url, op, outcome)),
        )
        outcomes = await client.trigger_gc()
    ours, foreign = cluster.bookie_http_url.rstrip("/"), stack.bookie_http_url.rstrip("/")
    assert outcomes == {ours: "200", foreign: "foreign"}, outcomes
    # The standalone's bookie was asked who it is, and nothing else.
    assert {op for url, op, _ in calls if url == foreign} == {"identify", "gc"}, calls
    assert (foreign, "gc", "foreign") in calls and not any(
        url == foreign and op == "gc" and outcome != "foreign" for url, op, outcome in calls
    ), calls
