"""``worker.core.broker_marks``: the brokers' signature, and the release rule."""

from __future__ import annotations

import pytest

from worker.core.broker_marks import MARK_PROPERTY, marked_by_broker, released_when_exhausted, signature


def test_the_signature_is_the_extensions() -> None:
    # The test vector the broker extension's JUnit test asserts too (PendingDeleteCodec signs the payload).
    assert signature(b"test-key", b"payload") == (
        "hmac-sha256:ce216971565342fd63ad7106fbea61bcda701ceac70c809b84adf50647026998"
    )


def test_a_property_alone_is_no_mark() -> None:
    # The extension's informational property: anyone able to publish to the queue can set it.
    assert not marked_by_broker(b"p", {"source": "broker-extension"}, b"key")
    assert marked_by_broker(b"p", {MARK_PROPERTY: signature(b"key", b"p")}, b"key")


@pytest.mark.parametrize(
    ("marked", "listed", "released"), [(True, True, True), (True, False, False), (False, True, False)]
)
def test_released_only_when_marked_and_listed(marked: bool, listed: bool, released: bool) -> None:
    assert released_when_exhausted(marked=marked, listed=listed) is released
