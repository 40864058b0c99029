"""``worker.core.message_properties``: numbers read from a message's properties, clamped."""

from __future__ import annotations

import pytest

from worker.core.message_properties import MAX_ATTEMPT_COUNT, attempts_so_far, first_seen_ms
from worker.formats import message as m


@pytest.mark.parametrize(
    ("props", "expected"),
    [
        ({}, 0),
        ({m.RECONSUMETIMES: "0"}, 0),
        ({m.RECONSUMETIMES: "3"}, 3),
        ({m.RECONSUMETIMES: " 4 "}, 4),
        ({m.RECONSUMETIMES: "-2"}, 0),
        ({m.RECONSUMETIMES: ""}, 0),
        ({m.RECONSUMETIMES: "abc"}, 0),
        ({m.RECONSUMETIMES: "1.5"}, 0),
        ({m.RECONSUMETIMES: "0x10"}, 0),
        ({m.RECONSUMETIMES: "100000"}, 100_000),
        # A count beyond a Java int (beyond int()'s digit limit, too) is a huge count, not garbage: clamped,
        # so the message is exhausted and dead-lettered instead of starting its retries over.
        ({m.RECONSUMETIMES: "9" * 5000}, MAX_ATTEMPT_COUNT),
        ({m.RECONSUMETIMES: "99999999999"}, MAX_ATTEMPT_COUNT),
        ({m.RECONSUMETIMES: "0" * 10_000 + "7"}, 7),
        ({m.RECONSUMETIMES: "-" + "9" * 5000}, 0),
        ({m.RECONSUMETIMES: "\u0663"}, 0),  # a non-ASCII digit is not a count
        ({m.RECONSUMETIMES: "\x00"}, 0),
        ({"reconsumetimes": "5"}, 0),  # the property name is exact
        ({"other": "7"}, 0),
    ],
)
def test_attempts_so_far(props: dict[str, str], expected: int) -> None:
    assert attempts_so_far(props) == expected


def test_first_seen_without_publish_time_is_now() -> None:
    assert first_seen_ms({m.FIRST_SEEN_MS: "junk"}, publish_ms=0, now_ms=9_999) == 9_999
