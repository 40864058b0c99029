"""The owner route on a real two-broker cluster, when the configured admin URL is the OTHER broker:
lookups answer with the owner, internalStats on the non-owner answers 307, the owner's internalStats is
the live state; for plain topics and for partitioned topics whose partitions live on different brokers."""

from __future__ import annotations

from pathlib import Path

from testkit.admin import StagingAdmin
from testkit.footprint import listed_as_loaded
from testkit.harness import WorkerHarness, create_ledgers, pulsar_ml_metadata
from testkit.harness import ml_info as ml
from testkit.topics import count_from_earliest, eventually, ml_ledger_ids, produce
from tests.cluster.conftest import Cluster
from tests.cluster.placement import move, spread
from worker.backends.bookie_http import BookieClient
from worker.backends.http import new_session
from worker.broker.admin import NotOwner
from worker.formats.topic_name import TopicName


async def test_admin_api_of_the_other_broker_redirects_to_the_owner(
    cluster: Cluster, cluster_namespace: str, unique: str
) -> None:
    base = f"persistent://{cluster_namespace}/parts-{unique}"
    plain = [f"persistent://{cluster_namespace}/plain-{unique}-{i}" for i in range(4)]
    async with new_session(30) as s:
        a = StagingAdmin(cluster.admin_url, s)
        await a.create_partitioned_topic(TopicName.parse(base), 8)
        parts = [f"{base}-partition-{i}" for i in range(8)]
        for t in parts + plain:
            produce(cluster.service_url, t, 7)
        owners = spread(cluster, parts + plain)
        assert set(owners.values()) == set(cluster.admin_urls), f"all topics landed on one broker: {owners}"
        assert {owners[p] for p in parts} == set(cluster.admin_urls), "partitions must span both brokers"

        for t, own in owners.items():
            tn = TopicName.parse(t)
            other = StagingAdmin(cluster.other(own), s)
            # The lookup, asked of either broker, names the owner.
            assert (await other.lookup(tn)).rstrip("/") == own
            assert (await StagingAdmin(own, s).lookup(tn)).rstrip("/") == own
            # The non-owner will not answer for the live state: 307 to the owner.
            try:
                await other.internal_stats(tn)
                raise AssertionError(f"{cluster.other(own)} answered internalStats of {t} it does not own")
            except NotOwner as e:
                assert e.location is not None and e.location.startswith(own), e.location
            # The owner's internalStats is the live state: 7 entries, a ledger per 5.  (Not
            # entriesAddedCounter: it counts since the topic was loaded, and spread() may have moved it.)
            stats = await other.internal_stats(tn, base=own)
            assert len(ml_ledger_ids(stats)) >= 2 and stats["numberOfEntries"] == 7, stats

        # A bundle that nobody owns (just unloaded): the lookup on the non-leader is a 307 chain that
        # the worker's lookup follows to whoever gets it.
        t = plain[0]
        move(cluster, t, cluster.other(owners[t]))
        assert (await StagingAdmin(owners[t], s).lookup(TopicName.parse(t))).rstrip("/") == cluster.other(owners[t])


async def test_worker_configured_with_the_other_broker_uses_the_owner(
    cluster: Cluster,
    cluster_namespace: str,
    unique: str,
    cbookie: BookieClient,
    tmp_path: Path,
    harnesses: list[WorkerHarness],
) -> None:
    """Orphans of live topics owned by either broker are deleted, live ledgers are kept, whichever broker
    the worker's admin URL names; the decision comes from the owner's live state."""
    base = f"persistent://{cluster_namespace}/wparts-{unique}"
    plain = [f"persistent://{cluster_namespace}/wplain-{unique}-{i}" for i in range(2)]
    async with new_session(30) as s:
        a = StagingAdmin(cluster.admin_url, s)
        await a.create_partitioned_topic(TopicName.parse(base), 4)
        topics = [f"{base}-partition-{i}" for i in range(4)] + plain
        for t in topics:
            produce(cluster.service_url, t, 12)
        owners = spread(cluster, topics)
        assert set(owners.values()) == set(cluster.admin_urls), owners
        live: dict[str, list[int]] = {}
        for t in topics:
            stats = await a.internal_stats(TopicName.parse(t), base=owners[t])
            live[t] = ml_ledger_ids(stats)[:-1]  # not the current one: a real candidate for deletion
        # Leaked ledgers of the live topics (Pulsar's own metadata, listed by nobody).
        orphans = {t: create_ledgers(cluster, 2, pulsar_ml_metadata(t)) for t in topics}
        # The owner route is taken for a topic its broker lists as loaded (a list refreshed every
        # statsUpdateFrequencyInSecs); before that its live state comes from the metadata store.
        await listed_as_loaded(a, topics)

    workers = []
    for i, admin_url in enumerate(cluster.admin_urls):
        w = WorkerHarness(
            cluster.via(admin_url),
            tmp_path,
            f"owner{i}-{unique}",
            worker={"max_attempts": 1000, "in_use_retry_s": 2},
        )
        harnesses.append(w)
        workers.append(w.start())
    # Worker 0 talks to broker 1, worker 1 to broker 2: each gets every topic, so each one meets topics
    # its broker does not own.
    for w in workers:
        for t in topics:
            for lid in live[t]:
                w.send(ml(t, lid))
    for t in topics:
        for lid in orphans[t][:1]:
            workers[0].send(ml(t, lid))
        for lid in orphans[t][1:]:
            workers[1].send(ml(t, lid))

    all_orphans = [i for ids in orphans.values() for i in ids]

    async def orphans_gone() -> bool:
        return all([await cbookie.get_metadata(i) is None for i in all_orphans])

    await eventually(orphans_gone, timeout=120, interval=1, what="every orphan deleted")

    async def in_use_seen() -> bool:
        return all(w.metric("ledger_deletion_in_use_total") >= sum(map(len, live.values())) for w in workers)

    await eventually(in_use_seen, timeout=60, what="every live ledger judged in use by both workers")
    for w in workers:
        assert w.metric("ledger_deletion_rejected_total") == 0
        assert w.metric("ledger_deletion_dlq_total") == 0
        # The lookups went to the configured broker, internalStats to the owner: both brokers served it.
        assert w.metric("ledger_deletion_admin_requests_total", endpoint="internal_stats", outcome="ok") > 0
    assert sum(w.metric("ledger_deletion_deleted_total", result="deleted", route="owner") for w in workers) == len(
        all_orphans
    )
    for w in workers:
        w.stop()
    for t in topics:
        for lid in live[t]:
            assert await cbookie.get_metadata(lid) is not None, f"live ledger {lid} of {t} was deleted"
        assert count_from_earliest(cluster.service_url, t) == 12, f"{t} does not read back completely"
