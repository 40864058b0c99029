"""When a delayed-delivery bucket ledger is in use (``worker.core.bucket_in_use``): named by its cursor's
properties, or held by its live subscription."""

from __future__ import annotations

import pytest

from tests.unit.fakes import BUCKET_KEY
from worker.core.bucket_in_use import BucketHold, CursorRecord, bucket_hold, bucket_ledgers, cursor_znode_name


def test_bucket_ledgers_are_the_values_of_the_bucket_properties() -> None:
    props = {BUCKET_KEY: "31", "#pulsar.internal.delayed.bucket_15_19": "32", "mine": "33", f"{BUCKET_KEY}x": "junk"}
    assert bucket_ledgers(props) == frozenset({31, 32})


def test_cursor_znode_name_is_javas_url_encoding() -> None:
    assert cursor_znode_name("my sub~*é") == "my+sub%7E*%C3%A9"


@pytest.mark.parametrize(
    ("props", "subscription_live", "hold"),
    [
        ({BUCKET_KEY: "31"}, True, BucketHold.LISTED),
        ({BUCKET_KEY: "31"}, False, BucketHold.LISTED),
        # Not in the cursor's properties, but its subscription is live: the owner may hold it in memory
        # (a bucket whose property write failed, a non-durable subscription): never proven unused.
        ({BUCKET_KEY: "32"}, True, BucketHold.SUBSCRIPTION_LIVE),
        (None, True, BucketHold.SUBSCRIPTION_LIVE),
        ({BUCKET_KEY: "32"}, False, None),
        (None, False, None),
    ],
)
def test_bucket_hold(props: dict[str, str] | None, subscription_live: bool, hold: BucketHold | None) -> None:
    assert bucket_hold(31, CursorRecord(props), subscription_live=subscription_live) is hold


def test_an_unread_cursor_holds_the_bucket() -> None:
    assert bucket_hold(31, None, subscription_live=False) is BucketHold.CURSOR_UNREAD
    assert not BucketHold.CURSOR_UNREAD.proven
    assert BucketHold.LISTED.proven
