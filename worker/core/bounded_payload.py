"""A payload or property set too big to keep whole, kept bounded: size, SHA-256 digest and the first KiB.

Two callers need the same rule: a dead letter that cannot be published whole (a payload near the broker's
``maxMessageSize``, or properties that make the copy too big) becomes a bounded copy, and a rejected
message is logged bounded (a log line must not carry megabytes an attacker chose). The digest lets an
operator match a log line, a bounded dead letter and the original message.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

HEAD_BYTES = 1024
# A bounded property set: at most this many entries, each key and value cut to these lengths (characters;
# at most 4 UTF-8 bytes each, so the whole set stays far below any broker's maxMessageSize: ~330 KB).
MAX_PROPERTIES = 64
PROPERTY_KEY_CHARS = 256
PROPERTY_VALUE_CHARS = 1024


@dataclass(frozen=True, slots=True)
class PayloadSummary:
    size: int
    sha256: str
    head: bytes  # the first HEAD_BYTES bytes

    @property
    def truncated(self) -> bool:
        return self.size > len(self.head)


def summarize(data: bytes, head_bytes: int = HEAD_BYTES) -> PayloadSummary:
    return PayloadSummary(len(data), hashlib.sha256(data).hexdigest(), bytes(data[:head_bytes]))


def head_text(text: str, limit: int = HEAD_BYTES) -> str:
    """``text`` cut to ``limit`` characters, saying how much was cut."""
    return text if len(text) <= limit else f"{text[:limit]}...(+{len(text) - limit} chars)"


def bounded_properties(props: Mapping[str, str], first: Iterable[str] = ()) -> tuple[dict[str, str], int]:
    """At most MAX_PROPERTIES entries with keys and values cut short; the keys in ``first`` (the worker's
    own) come first, so they survive the cut. Returns the bounded set and how many entries were cut or
    dropped."""
    order = [k for k in first if k in props] + [k for k in props if k not in set(first)]
    out: dict[str, str] = {}
    cut = 0
    for k in order:
        v = props[k]
        if len(out) >= MAX_PROPERTIES:
            cut += 1
            continue
        bk, bv = str(k)[:PROPERTY_KEY_CHARS], str(v)[:PROPERTY_VALUE_CHARS]
        if (bk, bv) != (k, v) or bk in out:
            cut += 1
        out.setdefault(bk, bv)
    return out, cut
