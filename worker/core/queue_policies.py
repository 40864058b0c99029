"""Which Pulsar policies on the queue topics (pending, retry, DLQ) would drop queued deletions: a message
TTL, a subscription expiration time, a backlog quota that evicts, an inactive-topic policy that deletes
caught-up topics (Pulsar 4.0.8, effective values; docs/design.md, "The queue keeps its work"). Retention
does not matter. A value the role may not read is None: unknown, neither safe nor unsafe.

One rule for ``run`` (``worker.broker.preflight.check_queue_policies``: refuses to start) and ``topology``
(``worker.broker.topology.ensure_queue_policies``: makes them safe, then checks with this rule).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

EVICTION = "consumer_backlog_eviction"
NON_EVICTING = "producer_request_hold"
CAUGHT_UP = "delete_when_subscriptions_caught_up"
# Backlog quota type -> the limit field the broker checks for it.
QUOTA_LIMITS = {"destination_storage": "limitSize", "message_age": "limitTime"}


@dataclass(frozen=True)
class TopicPolicies:
    """The effective policies of one queue topic; None where they could not be read."""

    topic: str
    message_ttl_s: int | None
    backlog_quotas: Mapping[str, Mapping[str, Any]] | None
    inactive_topic: Mapping[str, Any] | None


def _int(v: Any, default: int = 0) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


def message_ttl(topic: str, ttl_s: int | None) -> str | None:
    if ttl_s is None or ttl_s <= 0:
        return None
    return (
        f"messageTTL is {ttl_s} s on {topic}: the broker acknowledges older messages on every subscription, "
        "so queued deletions, retry copies and dead letters expire unseen (must be 0)"
    )


def subscription_expiration(namespace: str, minutes: int | None) -> str | None:
    if minutes is None or minutes <= 0:
        return None
    return (
        f"subscriptionExpirationTime is {minutes} min on {namespace}: a subscription without a connected "
        "consumer for that long (the worker's while it is stopped, the DLQ replay's between nightly runs) "
        "is deleted with its backlog (must be 0)"
    )


def evicting_quotas(quotas: Mapping[str, Mapping[str, Any]] | None) -> list[str]:
    """The backlog quota types that evict: policy ``consumer_backlog_eviction`` with a limit set."""
    out = []
    for kind, field in QUOTA_LIMITS.items():
        q = (quotas or {}).get(kind) or {}
        if q.get("policy") == EVICTION and _int(q.get(field), -1) >= 0:
            out.append(kind)
    return out


def backlog_quota(topic: str, quotas: Mapping[str, Mapping[str, Any]] | None) -> str | None:
    kinds = evicting_quotas(quotas)
    if not kinds:
        return None
    return (
        f"backlogQuota {', '.join(kinds)} has policy {EVICTION} on {topic}: past the limit the broker moves "
        f"the subscriptions past the oldest queued messages (use {NON_EVICTING} or producer_exception)"
    )


def deletes_caught_up_topic(policies: Mapping[str, Any] | None) -> bool:
    p = policies or {}
    return bool(p.get("deleteWhileInactive")) and p.get("inactiveTopicDeleteMode") == CAUGHT_UP


def inactive_topic(topic: str, policies: Mapping[str, Any] | None) -> str | None:
    if not deletes_caught_up_topic(policies):
        return None
    return (
        f"inactiveTopicPolicies delete {topic} when idle in mode {CAUGHT_UP}: the topic goes with its "
        "subscriptions, and the next pending deletions land on a topic nobody subscribes to"
    )


def dropping(topics: list[TopicPolicies], expirations: Mapping[str, int | None]) -> list[str]:
    """Every policy that would drop queued work, one sentence each, naming it; [] when none (or unknown)."""
    found: list[str | None] = [subscription_expiration(ns, m) for ns, m in sorted(expirations.items())]
    for t in topics:
        found += [message_ttl(t.topic, t.message_ttl_s), backlog_quota(t.topic, t.backlog_quotas)]
        found.append(inactive_topic(t.topic, t.inactive_topic))
    return [f for f in found if f]


def unknown(topics: list[TopicPolicies], expirations: Mapping[str, int | None]) -> list[str]:
    """The policies that could not be read, by name and where."""
    out = [f"subscriptionExpirationTime on {ns}" for ns, m in sorted(expirations.items()) if m is None]
    for t in topics:
        if t.message_ttl_s is None:
            out.append(f"messageTTL on {t.topic}")
        if t.backlog_quotas is None:
            out.append(f"backlogQuota on {t.topic}")
        if t.inactive_topic is None:
            out.append(f"inactiveTopicPolicies on {t.topic}")
    return out
