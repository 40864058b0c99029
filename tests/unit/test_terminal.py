"""The tables operators read (worker/commands/terminal.py): sized to a terminal, long names shortened in the
middle, nothing shortened without a terminal."""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.commands.terminal import (
    ELLIPSIS,
    Column,
    Output,
    column_widths,
    elide_end,
    elide_middle,
    fit,
    render_table,
)

COLUMNS = (
    Column("LEDGER"),
    Column("TOPIC", shrink="middle", min_width=24, keep=1),
    Column("COMPONENT", shrink="end", min_width=14),
    Column("SIZE", align="right"),
    Column("WHY", shrink="end", min_width=16),
)
# Names as the tables show them (table_topic: without persistent://).
LONG = "public/default/" + "a-very-long-topic-name-" * 20 + "end"


def _rows(topic: str = LONG) -> list[tuple[str, ...]]:
    return [
        ("40007", "public/default/orders", "MANAGED_LEDGER", "695 B", "not in its topic's ledger list"),
        ("40309", topic, "MANAGED_CURSOR (analytics)", "1.2 KiB", "topic gone"),
    ]


def test_elide_middle_keeps_both_ends() -> None:
    assert elide_middle("persistent://tenant/ns/topic-name", 20) == "persistent…opic-name"
    assert elide_middle("short", 20) == "short"
    assert len(elide_middle(LONG, 31)) == 31 and elide_middle(LONG, 31).endswith("name-end")
    assert elide_end("not in its topic's ledger list", 10) == "not in it" + ELLIPSIS


def test_no_terminal_shortens_nothing() -> None:
    lines = render_table(COLUMNS, _rows(), None).splitlines()
    assert LONG in lines[2] and ELLIPSIS not in "".join(lines)


def test_80_columns() -> None:
    lines = render_table(COLUMNS, _rows(), 80).splitlines()
    assert all(len(line) <= 80 for line in lines), [len(x) for x in lines]
    header, first, second = lines
    # ids and sizes whole, in their columns; the long name loses its middle, not its ends
    assert first.startswith("40007  ") and second.startswith("40309  ")
    assert "695 B" in first and "1.2 KiB" in second
    topic = second.split()[1]
    assert topic.startswith("public/default") and topic.endswith("name-end") and ELLIPSIS in topic
    # the name keeps its width longest: the prose columns were cut first
    assert len(topic) > 24 and "MANAGED_CURSOR (analytics)" not in second
    # the other columns line up under their headers
    assert header.index("SIZE") + len("SIZE") == first.index("695 B") + len("695 B")


def test_prose_gives_way_to_names() -> None:
    """The prose columns are cut to their minimum before the name loses anything; ids and sizes never are."""
    short = [r for r in _rows() if r[0] == "40007"]
    natural = column_widths(COLUMNS, short, None)
    widths = column_widths(COLUMNS, short, sum(natural) + 8 - 10)
    assert widths[1] == natural[1] == len("public/default/orders"), "the name stays whole"
    assert (widths[0], widths[3]) == (natural[0], natural[3])
    widths = column_widths(COLUMNS, _rows(), 120)
    assert widths[0] == 6 and widths[3] == 7, "ids and sizes are never shortened"
    assert (widths[2], widths[4]) == (14, 16), "the prose at its minimum"
    assert sum(widths) + 2 * 4 == 120


def test_within_a_tier_the_widest_gives_up_first() -> None:
    """Two prose columns: the long one is cut to the short one's width before that one loses anything."""
    cols = (Column("A", shrink="end", min_width=4), Column("B", shrink="end", min_width=4))
    assert column_widths(cols, [("x" * 50, "y" * 10)], 2 + 30) == [20, 10]
    assert column_widths(cols, [("x" * 50, "y" * 10)], 2 + 16) == [8, 8]


@given(
    width=st.integers(min_value=40, max_value=300),
    topics=st.lists(st.text(alphabet="abc/-:._", min_size=1, max_size=400), min_size=1, max_size=5),
)
def test_fits_whenever_the_minimums_do(width: int, topics: list[str]) -> None:
    rows = [r for t in topics for r in _rows(t)]
    widths = column_widths(COLUMNS, rows, width)
    natural = column_widths(COLUMNS, rows, None)
    floors = [
        w if c.shrink == "none" else min(w, max(c.min_width, len(c.header)))
        for c, w in zip(COLUMNS, natural, strict=True)
    ]
    lines = render_table(COLUMNS, rows, width).splitlines()
    if sum(floors) + 8 <= width:
        assert all(len(line) <= width for line in lines)
    for c, w, n, f in zip(COLUMNS, widths, natural, floors, strict=True):
        assert f <= w <= n
        if c.shrink == "none":
            assert w == n


def test_an_optional_column_is_left_out_rather_than_squeezing_the_rest() -> None:
    cols = (*COLUMNS, Column("LAST ERROR", shrink="end", min_width=16, optional=True))
    rows = [(*r, "bookie: 503 Service Unavailable " * 3) for r in _rows()]
    shown, _ = fit(cols, rows, 80)
    assert shown == [0, 1, 2, 3, 4], "at 80 columns the minimums of all six do not fit"
    shown, widths = fit(cols, rows, 200)
    assert shown == [0, 1, 2, 3, 4, 5] and sum(widths) + 2 * 5 == 200
    assert all(len(line) <= 80 for line in render_table(cols, rows, 80).splitlines())


def test_a_report_that_cannot_be_written_is_a_clear_error(tmp_path: Path) -> None:
    args = argparse.Namespace(output="table", report=str(tmp_path / "no-such-dir" / "r.json"))
    with pytest.raises(SystemExit, match=r"--report .*r\.json: No such file or directory"):
        Output(args, io.StringIO()).report({"a": 1})
    args = argparse.Namespace(output="json", report=str(tmp_path / "r.json"))
    out = io.StringIO()
    Output(args, out).report({"a": 1})
    assert out.getvalue() == (tmp_path / "r.json").read_text() == '{"a": 1}\n'
