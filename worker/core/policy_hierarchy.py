"""Which level of a topic policy the broker applies: the one rule behind every effective policy the worker reads
from the metadata store (retention, message TTL).

Pulsar resolves a topic's policy through ``HierarchyTopicPolicies`` (a ``PolicyHierarchyValue`` per policy): the
topic's own value, else its namespace's, else the broker's default. A value set at a level wins even when it is
the "off" value (a topic's TTL of 0 switches its namespace's TTL off for it).
"""

from __future__ import annotations

from typing import Literal, TypeVar

T = TypeVar("T")

Level = Literal["topic", "namespace", "broker"]


def applied(topic: T | None, namespace: T | None, broker_default: T) -> tuple[T, Level]:
    """The value the broker applies, and the level it comes from."""
    if topic is not None:
        return topic, "topic"
    if namespace is not None:
        return namespace, "namespace"
    return broker_default, "broker"
