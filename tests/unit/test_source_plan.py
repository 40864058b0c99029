"""The nightly data source's read plan (``worker.nightly.source_plan``): the positions of a partition it reads."""

from __future__ import annotations

import pytest

from worker.nightly.source_plan import TopicPartition, _position


def test_partition_skips_what_the_subscription_acknowledged() -> None:
    p = TopicPartition("t", end=(9, 5), start=(3, 4), acked=(((5, 1), (5, 3)),))
    assert p.skip((3, 4)) and p.skip((2, 9))  # at or before the mark-delete position
    assert not p.skip((3, 5))
    assert not p.skip((5, 1)) and p.skip((5, 2)) and p.skip((5, 3))  # (a..b] as Pulsar prints it
    assert not p.skip((5, 4))
    assert not TopicPartition("t", end=(1, 0), start=None).skip((0, 0))


@pytest.mark.parametrize(
    ("value", "pos"), [("12:-1", (12, -1)), ("3:7", (3, 7)), ("", None), ("x:1", None), ("1:2:3", None)]
)
def test_position(value: str, pos: tuple[int, int] | None) -> None:
    assert _position(value) == pos


def test_starting_bound_is_inclusive_and_combines_with_a_subscription() -> None:
    p = TopicPartition("t", end=(9, 9), start=(3, 4), first=(5, 0))
    assert p.skip((4, 9)) and not p.skip((5, 0)) and not p.skip((9, 9))
    q = TopicPartition("t", end=(9, 9), start=(6, 1), first=(5, 0))
    assert q.skip((6, 1)) and not q.skip((6, 2))
