"""The deletion topics and their subscriptions, created idempotently before anything is sent or read: a
topic without a subscription may lose messages to retention, so phase 1 and the daemon both call
:func:`ensure_topology` at start. Starters racing each other get 409, or 412 ``Subscription Busy``, which
prove nothing: each step then checks its own result and retries, a bounded number of times
(docs/cli.md, "The phase-1 library").
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from worker.broker.admin import PulsarAdmin
from worker.core.queue_policies import (
    NON_EVICTING,
    TopicPolicies,
    deletes_caught_up_topic,
    dropping,
    evicting_quotas,
)
from worker.errors import BackendError
from worker.formats.message import AVRO_SCHEMA
from worker.formats.topic_name import TopicName
from worker.logs import get_logger
from worker.settings import TopicsSettings

log = get_logger()

# Answers that may come from a concurrent creator: conflict, subscription busy (fencing), and the 500 a
# metadata-store version conflict surfaces as.
RACE_STATUSES = frozenset({409, 412, 500})
ATTEMPTS = 10
DELAY_S = 0.2  # grows linearly: at most ~9 s of waiting per step in all


class TopologyIncomplete(BackendError):
    """A step of the topology was still not in place after the bounded retries."""

    def __init__(self, message: str) -> None:
        super().__init__("admin", message)


class TopologyNotPermitted(BackendError):
    """A step is not in place and this role may not make it (401/403): a least-privileged worker or
    sender needs the topology made once by a tenant admin (``ledger-deletion-worker topology``)."""

    def __init__(self, what: str, e: BackendError) -> None:
        super().__init__("admin", f"{what} is not in place and this role may not create it ({e})", e.status)


async def _converge(
    what: str,
    act: Callable[[int], Awaitable[None]],
    done: Callable[[], Awaitable[bool]],
    *,
    attempts: int = ATTEMPTS,
    delay_s: float = DELAY_S,
) -> None:
    """Run ``act`` until ``done`` confirms its effect. A race status from ``act`` is not a failure by
    itself (another starter may be creating the same thing): only ``done`` decides. What is already in
    place is not written again, so a role that may read the topology but not create it starts."""
    if await done():
        return
    last: BackendError | None = None
    for attempt in range(attempts):
        try:
            await act(attempt)
        except BackendError as e:
            if e.status in (401, 403):
                raise TopologyNotPermitted(what, e) from e
            if e.status not in RACE_STATUSES:
                raise
            last = e
            log.info("topology step raced with another starter; checking", step=what, error=str(e))
        if await done():
            return
        await asyncio.sleep(delay_s * (attempt + 1))
    raise TopologyIncomplete(f"{what}: not in place after {attempts} attempts (last error: {last})")


async def _ensure_namespace(admin: PulsarAdmin, ns: str) -> None:
    tenant = ns.split("/")[0]

    async def act(_: int) -> None:
        await admin.ensure_namespace(ns)

    async def done() -> bool:
        return ns in await admin.list_namespaces(tenant)

    try:
        await _converge(f"namespace {ns}", act, done)
    except BackendError as e:
        # Without tenant-admin rights the namespace must be made by an operator; say so and go on:
        # topic creation below fails loudly if it really is missing.
        if e.status not in (401, 403):
            raise
        log.warning("cannot create namespace; assuming it exists", namespace=ns, error=str(e))


async def _ensure_pending(admin: PulsarAdmin, pending: TopicName, parallelism: int) -> None:
    async def act(_: int) -> None:
        if await admin.partitions(pending) == 0:
            await admin.create_partitioned_topic(pending, parallelism)

    async def done() -> bool:
        # 409 without partitions: a non-partitioned topic of that name exists (e.g. auto-created by a
        # producer that came first). It still works, but cannot spread over replicas by partition.
        return await admin.partitions(pending) > 0 or str(pending) in await admin.list_topics(
            pending.namespace_name, include_system=True
        )

    await _converge(f"partitioned topic {pending}", act, done)
    existing = await admin.partitions(pending)
    if existing == 0:
        log.warning("pending topic exists but is not partitioned", topic=str(pending))
    elif existing != parallelism:
        log.warning(
            "pending topic has a different partition count than topics.parallelism",
            topic=str(pending),
            partitions=existing,
            parallelism=parallelism,
        )


async def _ensure_topic(admin: PulsarAdmin, topic: TopicName) -> None:
    async def act(_: int) -> None:
        await admin.create_topic(topic)

    async def done() -> bool:
        # A partitioned topic of that name (an operator's choice) serves too; its base is not listed.
        return await admin.partitions(topic) > 0 or str(topic) in await admin.list_topics(
            topic.namespace_name, include_system=True
        )

    await _converge(f"topic {topic}", act, done)


async def _ensure_schema(admin: PulsarAdmin, topic: TopicName) -> None:
    definition = json.dumps(AVRO_SCHEMA)

    async def act(_: int) -> None:
        await admin.upload_schema(topic, "AVRO", definition)

    async def done() -> bool:
        info = await admin.schema_info(topic)
        if not info or info.get("type") != "AVRO":
            return False
        try:
            return bool(json.loads(info.get("data") or "null") == AVRO_SCHEMA)
        except ValueError:
            return False

    await _converge(f"schema of {topic}", act, done)


async def _ensure_subscription(admin: PulsarAdmin, topic: TopicName, subscription: str) -> None:
    partitions = await admin.partitions(topic)
    physical = [topic.partition(i) for i in range(partitions)] if partitions > 0 else [topic]

    async def missing() -> list[TopicName]:
        return [t for t in physical if subscription not in await admin.subscriptions(t)]

    async def act(attempt: int) -> None:
        if attempt == 0:
            # On a partitioned topic the broker creates it on every partition.
            await admin.create_subscription(topic, subscription)
            return
        # A 412 on one partition, or a 409 from a starter that died half-way, may leave a partition
        # without it: create it there, where it is missing.
        for t in await missing():
            await admin.create_subscription(t, subscription)

    async def done() -> bool:
        return not await missing()

    await _converge(f"subscription {subscription} on {topic}", act, done)


async def ensure_topology(admin: PulsarAdmin, topics: TopicsSettings) -> None:
    pending = TopicName.parse(topics.pending)
    retry = TopicName.parse(topics.retry)
    dlq = TopicName.parse(topics.dlq)
    for ns in sorted({pending.namespace_name, retry.namespace_name, dlq.namespace_name}):
        await _ensure_namespace(admin, ns)
    await _ensure_pending(admin, pending, topics.parallelism)
    await _ensure_topic(admin, retry)
    await _ensure_topic(admin, dlq)
    for t in (pending, retry, dlq):
        await _ensure_schema(admin, t)
    await _ensure_subscription(admin, pending, topics.subscription)
    await _ensure_subscription(admin, retry, topics.subscription)
    await _ensure_subscription(admin, dlq, topics.dlq_replay_subscription)


# ---- policies that would drop queued work (worker.core.queue_policies) --------------------------------

_UNREADABLE = object()


async def _read(call: Awaitable[Any]) -> Any:
    """The answer, or _UNREADABLE when this role may not read it (a least-privileged worker may not read
    policies: only tenant admins may)."""
    try:
        return await call
    except BackendError as e:
        if e.status in (401, 403):
            return _UNREADABLE
        raise


def _queue_topics(topics: TopicsSettings) -> list[TopicName]:
    return [TopicName.parse(t) for t in (topics.pending, topics.retry, topics.dlq)]


async def read_queue_policies(
    admin: PulsarAdmin, topics: TopicsSettings
) -> tuple[list[TopicPolicies], dict[str, int | None]]:
    """The effective policies of the queue topics, and the subscription expiration (minutes) of their
    namespaces; None where this role may not read them. The topics must exist."""
    names = _queue_topics(topics)
    out = []
    for t in names:
        # applied=true: what the broker applies (topic, else namespace, else its own default).
        ttl = await _read(admin.topic_policy(t, "messageTTL", applied=True))
        quotas = await _read(admin.topic_policy(t, "backlogQuotaMap", applied=True))
        inactive = await _read(admin.topic_policy(t, "inactiveTopicPolicies", applied=True))
        out.append(
            TopicPolicies(
                str(t),
                None if ttl is _UNREADABLE else int(ttl or 0),
                None if quotas is _UNREADABLE else dict(quotas or {}),
                None if inactive is _UNREADABLE else dict(inactive or {}),
            )
        )
    expirations: dict[str, int | None] = {}
    default: Any = None
    for ns in sorted({t.namespace_name for t in names}):
        # No topic level and no applied=true for this one in Pulsar 4.0: the namespace's value, else the
        # broker's subscriptionExpirationTimeMinutes (readable by a superuser only).
        minutes = await _read(admin.namespace_policy(ns, "subscriptionExpirationTime"))
        if minutes is None:
            if default is None:
                cfg = await _read(admin.broker_runtime_config())
                default = cfg if cfg is _UNREADABLE else int(cfg.get("subscriptionExpirationTimeMinutes") or 0)
            minutes = default
        expirations[ns] = None if minutes is _UNREADABLE else int(minutes)
    return out, expirations


async def ensure_queue_policies(admin: PulsarAdmin, topics: TopicsSettings) -> None:
    """Make the queue topics' policies safe (``topology``, as a tenant admin), then check them, waiting
    boundedly for topic-level policies to reach the broker (docs/design.md, "The queue keeps its work")."""
    names = _queue_topics(topics)
    namespaces = sorted({t.namespace_name for t in names})
    for ns in namespaces:
        await admin.set_namespace_policy(ns, "messageTTL", 0)
        await admin.set_namespace_policy(ns, "subscriptionExpirationTime", 0)
    for t in names:
        if int(await admin.topic_policy(t, "messageTTL", applied=False) or 0) > 0:
            await admin.remove_topic_policy(t, "messageTTL")
        for kind in evicting_quotas(await admin.topic_policy(t, "backlogQuotaMap", applied=False)):
            await admin.remove_topic_policy(t, "backlogQuota", {"backlogQuotaType": kind})
        if deletes_caught_up_topic(await admin.topic_policy(t, "inactiveTopicPolicies", applied=False)):
            await admin.remove_topic_policy(t, "inactiveTopicPolicies")
    for ns in namespaces:
        # What a topic of the namespace applies once its own values are gone: the namespace's or the
        # broker's default, set on the namespace where it drops work.
        t = next(t for t in names if t.namespace_name == ns)
        quotas = dict(await admin.namespace_policy(ns, "backlogQuotaMap") or {})
        if not quotas:
            quotas = dict(await admin.topic_policy(t, "backlogQuotaMap", applied=True) or {})
        for kind in evicting_quotas(quotas):
            q = quotas[kind]
            body = {"limitSize": q.get("limitSize", -1), "limitTime": q.get("limitTime", -1), "policy": NON_EVICTING}
            await admin.set_namespace_policy(ns, "backlogQuota", body, {"backlogQuotaType": kind})
        inactive = await admin.namespace_policy(ns, "inactiveTopicPolicies")
        if inactive is None:
            inactive = await admin.topic_policy(t, "inactiveTopicPolicies", applied=True)
        if deletes_caught_up_topic(inactive):
            await admin.set_namespace_policy(ns, "inactiveTopicPolicies", {**inactive, "deleteWhileInactive": False})
    problems: list[str] = []
    for attempt in range(ATTEMPTS):
        problems = dropping(*await read_queue_policies(admin, topics))
        if not problems:
            return
        await asyncio.sleep(DELAY_S * (attempt + 1))
    raise TopologyIncomplete(f"queue policies still drop work after {ATTEMPTS} checks: {'; '.join(problems)}")
