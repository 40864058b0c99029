"""A deletion the broker extension queued, whose ledger its topic still lists when attempts run out, is
released (acknowledged), not dead-lettered.

The extension queues a ledger before the broker's metadata write that drops it. When that write then
fails (a version conflict, a broker that dies between the send and the write), the ledger stays listed:
the worker keeps finding it in use. That is not a leak and needs no operator: the broker queues the
ledger again whenever it drops it for real, so the first message carries nothing the second will not.
Dead-lettering it would only bury the real dead letters under noise. Nothing is deleted on this path,
so a forged ``source`` property gains a forger nothing but an acknowledgement.
"""

from __future__ import annotations

from collections.abc import Mapping

# What the extension puts on every message it publishes (PendingDeletePublisher).
SOURCE_PROPERTY = "source"
BROKER_EXTENSION = "broker-extension"


def queued_by_broker(properties: Mapping[str, str]) -> bool:
    return properties.get(SOURCE_PROPERTY) == BROKER_EXTENSION


def released_when_exhausted(properties: Mapping[str, str], *, in_use: bool) -> bool:
    """Whether a message whose attempts are exhausted is acknowledged instead of dead-lettered."""
    return in_use and queued_by_broker(properties)
