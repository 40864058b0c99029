"""A deletion the broker extension queued, whose ledger its topic still lists as a closed ledger of its own
when attempts run out, is released (acknowledged), not dead-lettered.

The extension queues a ledger before the broker's metadata write that drops it. When that write then fails
on a version conflict, or the broker dies between the send and the write, the ledger stays listed: the
worker keeps finding it in use. That is not a leak and needs no operator: the broker queues the ledger again
whenever it drops it for real, so the first message carries nothing the second will not. Dead-lettering it
would only bury the real dead letters under noise.

Two conditions, each closing a way to lose a real leak:

- **The mark is the broker's.** The extension signs what it publishes (HMAC-SHA256 of the payload, under a
  key only the brokers and the worker hold: ``ledgerDeletionMarkKeyFile``, ``worker.broker_mark_key_file``).
  A property anyone able to publish to the queue could set would let a producer have its own messages
  released instead of kept for an operator. A retry copy keeps the payload and the properties, so the mark
  survives the retry chain; a changed payload does not verify.
- **What keeps the ledger is a listing the broker will drop again.** A closed ledger its topic's owner still
  lists in the managed ledger, or the current ledger of the cursor the message names: both are dropped
  again, and queued again, by the extension. Not released: an open ledger (a cursor's old ledger Pulsar
  deleted without closing it and then crashed: nothing will queue it again), a bucket ledger a live
  subscription holds, a ledger held only because its topic may be compacting, a schema ledger.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

# The message property the extension signs with (PendingDeletePublisher), and the form of its value.
MARK_PROPERTY = "ledger-deletion-mark"
MARK_SCHEME = "hmac-sha256:"


def signature(key: bytes, payload: bytes) -> str:
    """The mark the extension puts on a message of ``payload`` under ``key``."""
    return MARK_SCHEME + hmac.new(key, payload, hashlib.sha256).hexdigest()


def marked_by_broker(payload: bytes, properties: Mapping[str, str], key: bytes | None) -> bool:
    """Whether the message carries the brokers' own mark (never without a key: nothing is then released)."""
    if key is None:
        return False
    mark = properties.get(MARK_PROPERTY)
    return isinstance(mark, str) and hmac.compare_digest(mark.encode(), signature(key, payload).encode())


def released_when_exhausted(*, marked: bool, listed: bool) -> bool:
    """Whether a message whose attempts are exhausted is acknowledged instead of dead-lettered: the broker's
    own mark, and its ledger kept by a listing the broker drops again (``worker.core.decision.Listing``)."""
    return marked and listed
