"""Delayed-delivery bucket ledgers: when one is in use. One rule for the worker's decision
(``worker.core.decision``), the scanner and, through it, the nightly audit.

Each bucket is a cursor property ``#pulsar.internal.delayed.bucket_<start>_<end>`` = snapshot ledger id, in
the cursor's znode only (Pulsar 4.0.8, ``BucketDelayedDeliveryTracker``). The property proves use, not
disuse: the tracker also holds buckets from memory alone (a failed, ignored property write; a non-durable
subscription). So a bucket ledger is unused only when its property is gone **and** its subscription is gone
from the owner's live state, or the topic is proven gone (docs/design.md, "Delayed-delivery bucket ledgers").
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote_plus

from worker.formats.topic_name import java_url_encode

# BucketDelayedDeliveryTracker.DELAYED_BUCKET_KEY_PREFIX (ManagedCursor.CURSOR_INTERNAL_PROPERTY_PREFIX +
# "delayed.bucket"); Bucket.bucketKey() appends "_<startLedgerId>_<endLedgerId>".
BUCKET_KEY_PREFIX = "#pulsar.internal.delayed.bucket"


def bucket_ledgers(cursor_properties: Mapping[str, str]) -> frozenset[int]:
    """The snapshot ledgers a cursor's properties name (a value that is no ledger id names none: Pulsar
    fails to read that bucket too)."""
    out = set()
    for key, value in cursor_properties.items():
        if key.startswith(BUCKET_KEY_PREFIX + "_") and value.isascii() and value.isdigit():
            out.add(int(value))
    return frozenset(out)


def cursor_znode_name(subscription: str) -> str:
    """The cursor's name in the metadata store and in ``internalStats`` (``Codec.encode``), from the
    subscription name a bucket ledger's metadata records (``Codec.decode`` of it)."""
    return java_url_encode(subscription)


def subscription_of(cursor: str) -> str:
    """The subscription name a bucket ledger's metadata records (``Codec.decode``) from its cursor's
    znode name."""
    return unquote_plus(cursor)


@dataclass(frozen=True, slots=True)
class CursorRecord:
    """What the metadata store holds for the bucket's subscription: its cursor properties, or None when the
    cursor has no znode."""

    properties: Mapping[str, str] | None


class BucketHold(enum.Enum):
    """Why a live topic keeps a bucket ledger."""

    LISTED = "named by a delayed-delivery bucket property of its cursor"
    # Not proven in use, not proven unused: the worker keeps it, the scanner skips it.
    SUBSCRIPTION_LIVE = (
        "its subscription is live on the owner, which may hold the bucket in memory only (a failed property"
        " write, a non-durable subscription)"
    )
    CURSOR_UNREAD = "its cursor's properties were not read"

    @property
    def proven(self) -> bool:
        return self is BucketHold.LISTED


def bucket_hold(ledger_id: int, cursor: CursorRecord | None, *, subscription_live: bool) -> BucketHold | None:
    """Why the topic (known to exist) keeps the bucket ledger ``ledger_id``, or None: unused.

    ``cursor``: the subscription's cursor as the metadata store holds it (None: not read);
    ``subscription_live``: whether the owner's live state lists that cursor."""
    if cursor is None:
        return BucketHold.CURSOR_UNREAD
    if cursor.properties is not None and ledger_id in bucket_ledgers(cursor.properties):
        return BucketHold.LISTED
    if subscription_live:
        return BucketHold.SUBSCRIPTION_LIVE
    return None
