"""The scanner's grouping of candidates by topic (``worker.operations.topic_groups``): the same groups in
memory and spilled to temporary files, each row once, nothing left behind."""

from __future__ import annotations

import os
import random
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from worker.operations.topic_groups import TopicGroups


def rows_of(groups: TopicGroups) -> dict[str, list[list[object]]]:
    out: dict[str, list[list[object]]] = {}
    for topic, rows in groups:
        assert topic not in out, f"{topic} yielded twice"
        out[topic] = rows
    return out


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10**12)), max_size=300), st.integers(1, 40))
def test_spilled_groups_equal_the_groups_in_memory(rows: list[tuple[int, int]], max_rows: int) -> None:
    expected: dict[str, list[list[object]]] = {}
    groups = TopicGroups(max_rows=max_rows, buckets=7)
    for t, lid in rows:
        topic = f"persistent://t/ns/x{t}"
        row: list[object] = [lid, "CLOSED", None, 1.5]
        expected.setdefault(topic, []).append(row)
        groups.add(topic, row)
    try:
        got = rows_of(groups)
    finally:
        groups.close()
    assert {t: sorted(map(tuple, r)) for t, r in got.items()} == {  # type: ignore[arg-type]
        t: sorted(map(tuple, r))
        for t, r in expected.items()  # type: ignore[arg-type]
    }
    assert groups.rows == len(rows)
    assert (groups.spilled > 0) == (len(rows) > max_rows)


def test_spilling_holds_at_most_max_rows_in_memory_and_cleans_up(tmp_path: Path) -> None:
    groups = TopicGroups(max_rows=100, buckets=8, spill_dir=str(tmp_path))
    rnd = random.Random(3)
    for i in range(5_000):
        groups.add(f"persistent://t/ns/x{rnd.randrange(500)}", [i])
        assert groups._in_memory <= 100
    [spill] = list(tmp_path.iterdir())
    assert len(os.listdir(spill)) == 8
    got = rows_of(groups)
    assert sum(len(r) for r in got.values()) == 5_000 and len(got) == 500
    assert os.listdir(spill) == []  # each file is removed once read
    groups.close()
    assert list(tmp_path.iterdir()) == []
