"""The phase-2 daemon: consume pending + retry topics on one Shared subscription and run the pipeline.

Shape of the loop (the lessons are in the comments): one long-lived receive loop whose awaited ``receive()``
is never cancelled (the C++ client would hand the message to a future nobody reads, unacknowledged until we
close); one batch at a time swept and dispatched, ``max_inflight`` bounding the messages decided at once; on
SIGTERM/SIGINT, in-flight messages settle until ``drain_timeout_s`` and the rest goes to another replica
unacknowledged (docs/design.md, "Phase 2: six steps per message").
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import signal
import time
from collections.abc import Callable
from typing import Any

import pulsar

from worker.broker.admin import PulsarAdmin
from worker.broker.batch_consumer import BatchConsumer
from worker.broker.client import Producer, blocking_client, close_client
from worker.broker.preflight import (
    check_admin,
    check_pulsar_store,
    check_queue_policies,
    pending_anchors,
    prove_bookkeeper_store,
    refused_as,
)
from worker.broker.topology import TopologyNotPermitted, ensure_topology
from worker.core.dispatch import Dispatch
from worker.core.pace import Pace, PaceChange, PaceRules
from worker.daemon import http_server
from worker.daemon.bookie_gc import open_bookie_gc
from worker.daemon.decider import Decider, open_decider
from worker.daemon.envelope import Envelope
from worker.daemon.pipeline import Pipeline
from worker.daemon.settlement import Settler
from worker.errors import StartupRefused
from worker.formats.topic_name import TopicName
from worker.logs import configure, get_logger
from worker.metrics import Metrics, oldest_backlog_age_s
from worker.settings import Settings

log = get_logger()

# How long the start waits for the pending topic's first partition to list its current ledger (it is being
# loaded for this worker's consumer) before BookKeeper's store counts as unproven.
STORE_PROOF_WAIT_S = 30.0
# Probe reads of BookKeeper's store per pace interval (worker.core.pace): its minimum evidence.
PACE_PROBES = 5


def batch_size(max_inflight: int, receive_batch: int) -> int:
    """Messages received at once (``worker.receive_batch``, at least ``max_inflight``, at most 1,000): a
    batch is swept together, and its messages dispatched as room frees (``Daemon._receive_loop``). It is
    also the receiver queue's size: a batch receive waits for as many messages as it asks for, which a
    smaller queue never holds, so every receive would wait out its timeout."""
    return max(1, min(1000, max(max_inflight, receive_batch)))


class Daemon:
    def __init__(self, settings: Settings, metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics or Metrics()
        self.stopping = asyncio.Event()
        self.ready = False
        self._tasks: set[asyncio.Task[Any]] = set()  # one per dispatched batch (it awaits its messages' own)
        self._busy = 0  # messages being decided: at most max_inflight
        self._in_hand = False  # a batch is being swept, or waits for room to dispatch what its sweep left
        self._room = asyncio.Event()  # set when an in-flight message settles (or on stop)
        self._partitioned: dict[str, bool] = {}

    def request_stop(self) -> None:
        if not self.stopping.is_set():
            log.info("stop requested: draining in-flight messages")
            self.stopping.set()
            self._room.set()

    async def run(self) -> int:
        s = self.settings
        async with contextlib.AsyncExitStack() as stack:
            decider = await stack.enter_async_context(open_decider(s, self.metrics))
            admin = decider.admin

            runner = await http_server.start(
                http_server.build_app(self.metrics, lambda: self.ready and not self.stopping.is_set()),
                s.http.host,
                s.http.port,
            )
            stack.push_async_callback(runner.cleanup)

            await check_admin(admin, s.pulsar, TopicName.parse(s.topics.pending))
            try:
                await ensure_topology(admin, s.topics)
            except TopologyNotPermitted as e:
                raise StartupRefused(
                    f"pulsar.admin_url {s.pulsar.admin_url}: {e}; token from {s.pulsar.token_source}. Create it once "
                    "with a tenant-admin token: ledger-deletion-worker topology"
                ) from e
            # No TTL, subscription expiration, evicting quota or inactive-topic deletion may drop the queue.
            await check_queue_policies(admin, s.topics)
            # Only now does the pending topic surely have its managed ledger: prove Pulsar's store holds it.
            await check_pulsar_store(decider.pulsar, TopicName.parse(s.topics.pending))

            client = blocking_client(s.pulsar)
            stack.push_async_callback(close_client, client)
            with refused_as(s.pulsar, f"produce to {s.topics.retry}"):
                retry_producer = await Producer.create(client, s.topics.retry, batching_enabled=False)
            stack.push_async_callback(retry_producer.close)
            with refused_as(s.pulsar, f"produce to {s.topics.dlq}"):
                dlq_producer = await Producer.create(client, s.topics.dlq, batching_enabled=False)
            stack.push_async_callback(dlq_producer.close)
            batch = batch_size(s.worker.max_inflight, s.worker.receive_batch)
            with refused_as(s.pulsar, f"consume {s.topics.pending} and {s.topics.retry}"):
                consumer = await BatchConsumer.subscribe(
                    client,
                    [s.topics.pending, s.topics.retry],
                    s.topics.subscription,
                    consumer_type=pulsar.ConsumerType.Shared,
                    # A bounded prefetch (one batch): what sits in our queue is invisible to the other
                    # replicas, and Pulsar's default of 1,000 would hide eight batches.
                    receiver_queue_size=batch,
                    negative_ack_redelivery_delay_ms=int(s.worker.backoff_initial_s * 1000) or 1000,
                    batch_receive_policy=pulsar.ConsumerBatchReceivePolicy(batch, -1, s.worker.batch_wait_ms),
                )
            # BookKeeper's store anchored to Pulsar's: the pending partitions this consumer keeps loaded each
            # have a current ledger, which must be in that store, naming its topic.
            await prove_bookkeeper_store(
                decider.pulsar,
                decider.bookkeeper,
                pending_anchors(TopicName.parse(s.topics.pending)),
                wait_s=STORE_PROOF_WAIT_S,
            )
            bookie_gc = await stack.enter_async_context(
                open_bookie_gc(s.bookkeeper, decider.bookkeeper.registered_bookies, self.metrics)
            )
            pipeline = Pipeline(
                decider=decider,
                settler=Settler(
                    consumer,
                    retry_producer,
                    dlq_producer,
                    self.metrics,
                    max_payload_bytes=s.worker.max_payload_bytes,
                ),
                settings=s.worker,
                metrics=self.metrics,
                on_freed=bookie_gc.freed if bookie_gc is not None else None,
            )

            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(sig, self.request_stop)

            poller = asyncio.create_task(self._poll_topic_stats(admin))
            pacer = asyncio.create_task(self._pace(decider))
            self.ready = True
            self.metrics.ready.set(1)
            log.info(
                "worker ready",
                pending=s.topics.pending,
                retry=s.topics.retry,
                dlq=s.topics.dlq,
                subscription=s.topics.subscription,
                max_inflight=s.worker.max_inflight,
            )
            receiver = asyncio.create_task(self._receive_loop(consumer, pipeline))
            await self.stopping.wait()
            self.ready = False
            self.metrics.ready.set(0)
            await self._drain()
            # Closing the consumer completes the pending receive() with an error, ending the loop; any
            # message it had prefetched is unacknowledged and goes back to the subscription.
            await consumer.close()
            await asyncio.wait([receiver], timeout=10)
            for background in (poller, pacer):
                background.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await background
            log.info("worker stopped")
        return 0

    async def _receive_loop(self, consumer: BatchConsumer, pipeline: Pipeline) -> None:
        """Receive a batch, sweep it (``Pipeline.settle_already_gone``), and decide each message its sweep left
        on its own task, dispatched as room frees under ``max_inflight``; the next batch is received meanwhile.
        Messages dispatched together share one instant (``single_flight_reads``). Received but not yet dispatched,
        a message is unacknowledged prefetch: a crash or a stop hands it to another replica (docs/design.md, "The
        batched hot path")."""
        received: list[pulsar.Message] = []
        while not self.stopping.is_set():
            if not received:
                try:
                    received = await consumer.receive_batch()
                except Exception as e:
                    if self.stopping.is_set():
                        break
                    log.error("receive failed", error=f"{type(e).__name__}: {e}")
                    await asyncio.sleep(1)
                    continue
                if received:
                    self.metrics.batch_messages.observe(len(received))
                continue
            await self._until(lambda: not self._in_hand)
            if self.stopping.is_set():
                # Received while draining: not ours to process any more; unacknowledged, they are
                # redelivered to another consumer when this one closes.
                break
            self._in_hand = True
            task = asyncio.create_task(self._process_batch(consumer, pipeline, received))
            received = []
            self._tasks.add(task)
            task.add_done_callback(self._done)

    async def _until(self, room: Callable[[], bool]) -> None:
        """Wait until ``room()`` holds or a stop is requested: re-checked whenever a message or a batch
        settles (``_room``)."""
        while not room() and not self.stopping.is_set():
            self._room.clear()
            await self._room.wait()

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        self._room.set()

    def _release(self, n: int) -> None:
        self._busy -= n
        self._room.set()

    async def _process_batch(self, consumer: BatchConsumer, pipeline: Pipeline, batch: list[pulsar.Message]) -> None:
        """One received batch: its sweep, then a task for each message left, dispatched as room frees and
        awaited here, so that a drain (which waits for, then cancels, the batches) covers them."""
        limit = self.settings.worker.max_inflight
        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[None]] = []
        try:
            self.metrics.inflight.inc(len(batch))
            envs = pipeline.read(batch)
            try:
                left, reads = await pipeline.settle_already_gone(envs)
            except Exception as e:
                # A defect in the sweep must not park its batch unacknowledged until this consumer closes:
                # every message goes the full way (one it already acknowledged is found gone again).
                self.metrics.failed.labels(stage="sweep").inc()
                log.error("batch sweep failed; its messages are decided one by one", error=f"{type(e).__name__}: {e}")
                left, reads = envs, {}
            finally:
                self.metrics.inflight.dec(len(batch))
            waiting = collections.deque(left)
            while waiting:
                await self._until(lambda: self._busy < limit)
                if self.stopping.is_set():
                    break  # undispatched, unacknowledged: handed to another consumer when this one closes
                # Every message dispatched now was received before this instant; they share the sweep's reads.
                dispatch = Dispatch(loop.time(), reads)
                for _ in range(min(limit - self._busy, len(waiting))):
                    env = dataclasses.replace(waiting.popleft(), dispatch=dispatch)
                    task = asyncio.create_task(self._process(consumer, pipeline, env))
                    self._busy += 1
                    task.add_done_callback(lambda _: self._release(1))
                    tasks.append(task)
            self._in_hand = False  # the next batch may be swept while these settle
            self._room.set()
            await asyncio.gather(*tasks, return_exceptions=True)
        except asyncio.CancelledError:
            for task in tasks:  # cancelled while waiting for room: what it dispatched goes with it
                task.cancel()
            raise
        finally:
            if self._in_hand:
                self._in_hand = False
                self._room.set()

    async def _process(self, consumer: BatchConsumer, pipeline: Pipeline, env: Envelope) -> None:
        self.metrics.inflight.inc()
        try:
            await pipeline.handle(env)
        except Exception as e:
            # The pipeline dead-letters every message it cannot settle (a failure that repeats on every
            # delivery must not loop). This is what is left: the DLQ refused even a bounded copy (the broker
            # or the DLQ topic is unavailable), or a bug outside the settle path. Nothing was acknowledged:
            # ask for redelivery rather than leave the message parked in this consumer; the redelivery counts
            # as an attempt (``Envelope.attempt``), and the DLQ takes it once it is back.
            self.metrics.failed.labels(stage="settle").inc()
            log.error("message not settled; negative-acknowledged", error=f"{type(e).__name__}: {e}")
            try:
                await consumer.negative_acknowledge(env.message)
            except Exception as nack_error:
                # Nothing more can be done here: closing this consumer hands the message to another.
                log.error("negative acknowledge failed", error=f"{type(nack_error).__name__}: {nack_error}")
        finally:
            self.metrics.inflight.dec()

    async def _drain(self) -> None:
        if not self._tasks:
            return
        deadline = self.settings.worker.drain_timeout_s
        log.info("draining", inflight=len(self._tasks), deadline_s=deadline)
        _, pending = await asyncio.wait(set(self._tasks), timeout=deadline)
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.wait(pending, timeout=5)
            log.warning("drain deadline passed; unsettled messages handed back", count=len(pending))

    async def _pace(self, decider: Decider) -> None:
        """Every ``pace_interval_s``: the latency of this worker's calls to BookKeeper's metadata store sets
        the storage delete rate (``worker.core.pace``), within ``deletes_per_second``, while there are deletes
        to pace; it holds while there are none. One log line when it slows, one when it recovers."""
        w = self.settings.worker
        self.metrics.pace_rate.set(w.deletes_per_second)
        floor = min(w.pace_floor_per_second, w.deletes_per_second)
        pace = Pace(PaceRules(w.deletes_per_second, floor, w.pace_latency_factor))
        limiter = decider.limiter
        if w.pace:
            limiter.set_rate(pace.rate)
            self.metrics.pace_rate.set(pace.rate)
        store = decider.bookkeeper
        taken = limiter.taken
        while True:
            # A few probe reads an interval, so that the store's answer is known even when this worker makes
            # few calls of its own (a low rate must not hold itself low for lack of evidence).
            for _ in range(PACE_PROBES):
                await asyncio.sleep(w.pace_interval_s / PACE_PROBES)
                if w.pace:
                    with contextlib.suppress(Exception):  # a failed probe is a timeout the latency records
                        await store.probe()
            samples = store.drain_latency()
            for kind, seconds in samples.items():
                observe = self.metrics.metadata_calls.labels(kind=kind).observe
                for s in seconds:
                    observe(s)
            if not w.pace:
                continue
            # The deletes this interval paced: those that took a token in it, and those still waiting for one.
            deletes = limiter.taken - taken + limiter.waiting
            taken = limiter.taken
            before = pace.decreases
            rate = pace.update(samples, deletes=deletes)
            limiter.set_rate(rate)
            self.metrics.pace_rate.set(rate)
            if pace.last_ratio is not None:
                self.metrics.pace_latency_ratio.set(pace.last_ratio)
            if pace.decreases > before:
                self.metrics.pace_decreases.inc(pace.decreases - before)
            if pace.last_change is PaceChange.SLOWED:
                log.info(
                    "metadata store slow: delete pace slowed",
                    deletes_per_second=round(rate, 1),
                    latency_ratio=round(pace.last_ratio or 0.0, 2),
                )
            elif pace.last_change is PaceChange.RECOVERED:
                log.info("metadata store recovered: delete pace back at its ceiling", deletes_per_second=round(rate, 1))

    async def _poll_topic_stats(self, admin: PulsarAdmin) -> None:
        t = self.settings.topics
        while True:
            try:
                await self._poll_once(admin, t.pending, "pending", t.subscription)
                await self._poll_once(admin, t.retry, "retry", t.subscription)
                await self._poll_once(admin, t.dlq, "dlq", t.dlq_replay_subscription)
            except Exception as e:  # metrics polling must never take the worker down
                log.debug("topic stats poll failed", error=str(e))
            await asyncio.sleep(self.settings.worker.stats_poll_interval_s)

    async def _poll_once(self, admin: PulsarAdmin, topic: str, role: str, sub: str) -> None:
        tn = TopicName.parse(topic)
        if topic not in self._partitioned:
            # Fixed once the topology exists: asked once per topic, not on every poll.
            self._partitioned[topic] = await admin.partitions(tn) > 0
        get = admin.partitioned_stats if self._partitioned[topic] else admin.stats
        st = await get(tn, earliest_time_in_backlog=True)
        self.metrics.topic_published.labels(role=role).set(float(st.get("msgInCounter", 0)))
        sub_stats = (st.get("subscriptions") or {}).get(sub) or {}
        self.metrics.topic_backlog.labels(role=role).set(float(sub_stats.get("msgBacklog", 0)))
        age = oldest_backlog_age_s(sub_stats, int(time.time() * 1000))
        self.metrics.topic_oldest_backlog_age.labels(role=role).set(age)


async def run_daemon(settings: Settings) -> int:
    configure(settings.logging.level, settings.logging.format)
    try:
        return await Daemon(settings).run()
    except StartupRefused as e:
        log.error("startup refused", error=str(e))
        raise
