"""A deletion the broker extension queued, whose ledger its topic still lists as a closed ledger of its own
when attempts run out, is released (acknowledged), not dead-lettered: the broker's metadata write that
would drop it failed (a version conflict, a crash after the send), and the broker queues it again when it
drops it for real, so dead-lettering would only bury real dead letters (docs/design.md, "Outcomes and what
each settles to").

Two conditions, each closing a way to lose a real leak:

- **The mark is the broker's**: an HMAC-SHA256 of the payload under a key only the brokers and the worker
  hold (docs/broker-extension.md), not a property any producer could set; a retry copy keeps it.
- **What keeps the ledger is a listing the broker will drop again**: a closed managed-ledger ledger, or the
  current ledger of the cursor the message names. Not released: an open ledger (nothing will queue it
  again), a bucket ledger, a ledger held only because its topic may be compacting, a schema ledger.
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
