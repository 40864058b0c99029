"""The bounded form of a payload and of a property set (worker.core.bounded_payload)."""

from __future__ import annotations

import hashlib

from hypothesis import given
from hypothesis import strategies as st

from worker.core.bounded_payload import (
    HEAD_BYTES,
    MAX_PROPERTIES,
    PROPERTY_KEY_CHARS,
    PROPERTY_VALUE_CHARS,
    bounded_properties,
    head_text,
    summarize,
)


def test_summary_of_a_small_payload_is_the_payload() -> None:
    s = summarize(b"abc")
    assert (s.size, s.sha256, s.head, s.truncated) == (3, hashlib.sha256(b"abc").hexdigest(), b"abc", False)


def test_summary_of_a_large_payload_keeps_its_first_kib() -> None:
    data = bytes(range(256)) * 100
    s = summarize(data)
    assert s.size == len(data) and s.head == data[:HEAD_BYTES] and s.truncated
    assert s.sha256 == hashlib.sha256(data).hexdigest()


def test_head_text_says_what_it_cut() -> None:
    assert head_text("x" * HEAD_BYTES) == "x" * HEAD_BYTES
    cut = head_text("x" * (HEAD_BYTES + 5))
    assert cut.startswith("x" * HEAD_BYTES) and cut.endswith("(+5 chars)")


def test_the_workers_own_properties_survive_the_cut() -> None:
    props = {f"k{i:03}": "v" for i in range(200)} | {"reason": "invalid", "last_error": "e"}
    out, cut = bounded_properties(props, first=("reason", "last_error"))
    assert list(out)[:2] == ["reason", "last_error"]
    assert len(out) == MAX_PROPERTIES
    assert cut == len(props) - MAX_PROPERTIES


def test_long_keys_and_values_are_cut_and_counted() -> None:
    out, cut = bounded_properties({"k" * 1000: "v" * 5000, "ok": "fine"})
    assert out == {"k" * PROPERTY_KEY_CHARS: "v" * PROPERTY_VALUE_CHARS, "ok": "fine"}
    assert cut == 1


def test_keys_that_collide_once_cut_keep_the_first() -> None:
    a, b = "k" * PROPERTY_KEY_CHARS + "a", "k" * PROPERTY_KEY_CHARS + "b"
    out, cut = bounded_properties({a: "1", b: "2"})
    assert out == {"k" * PROPERTY_KEY_CHARS: "1"} and cut == 2


@given(st.dictionaries(st.text(max_size=400), st.text(max_size=2000), max_size=100))
def test_any_property_set_is_bounded(props: dict[str, str]) -> None:
    out, cut = bounded_properties(props)
    assert len(out) <= MAX_PROPERTIES
    assert all(len(k) <= PROPERTY_KEY_CHARS and len(v) <= PROPERTY_VALUE_CHARS for k, v in out.items())
    assert len(out) + cut >= len(props)
    assert sum(len(k.encode()) + len(v.encode()) for k, v in out.items()) <= MAX_PROPERTIES * 4 * (
        PROPERTY_KEY_CHARS + PROPERTY_VALUE_CHARS
    )
