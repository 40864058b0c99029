"""The deletion topics and their subscriptions, created idempotently before anything is sent or read.

A topic without a subscription may lose messages to retention, so the worker subscription (and the DLQ
replay subscription) must exist before the first message: both phase 1 and the daemon call
:func:`ensure_topology` at start.
"""

from __future__ import annotations

import json

from worker.http import BackendError
from worker.logs import get_logger
from worker.message import AVRO_SCHEMA
from worker.pulsar_admin import PulsarAdmin
from worker.settings import TopicsSettings
from worker.topic_name import TopicName

log = get_logger()


async def ensure_topology(admin: PulsarAdmin, topics: TopicsSettings) -> None:
    pending = TopicName.parse(topics.pending)
    retry = TopicName.parse(topics.retry)
    dlq = TopicName.parse(topics.dlq)
    for ns in sorted({pending.namespace_name, retry.namespace_name, dlq.namespace_name}):
        try:
            await admin.ensure_namespace(ns)
        except BackendError as e:
            # Without tenant-admin rights the namespace must be made by an operator; say so and go on:
            # topic creation below fails loudly if it really is missing.
            if e.status not in (401, 403):
                raise
            log.warning("cannot create namespace; assuming it exists", namespace=ns, error=str(e))

    existing = await admin.partitions(pending)
    if existing == 0:
        await admin.create_partitioned_topic(pending, topics.parallelism)
        existing = await admin.partitions(pending)
    if existing == 0:
        # 409 without partitions: a non-partitioned topic of that name exists (e.g. auto-created by a
        # producer that came first). It still works, but cannot spread over replicas by partition.
        log.warning("pending topic exists but is not partitioned", topic=str(pending))
    elif existing != topics.parallelism:
        log.warning(
            "pending topic has a different partition count than topics.parallelism",
            topic=str(pending),
            partitions=existing,
            parallelism=topics.parallelism,
        )
    await admin.create_topic(retry)
    await admin.create_topic(dlq)
    for t in (pending, retry, dlq):
        await admin.upload_schema(t, "AVRO", json.dumps(AVRO_SCHEMA))
    await admin.create_subscription(pending, topics.subscription)
    await admin.create_subscription(retry, topics.subscription)
    await admin.create_subscription(dlq, topics.dlq_replay_subscription)
