"""Numbers read from a message's properties: untrusted input, clamped, never a reason to fail.

A retry or dead-letter copy carries ``RECONSUMETIMES`` and ``first_seen_ms``; anyone able to publish to the
queue can write anything there. The daemon, the nightly replay and ``dlq list`` read them through these
functions (the replay's Spark expression applies the same bounds), so a huge count reads as exhausted,
garbage as absent, and a time in the future as now.
"""

from __future__ import annotations

from collections.abc import Mapping

from worker.formats import message as m

# RECONSUMETIMES is a Java int for Pulsar's own consumers; a larger count is clamped to it (and so is
# exhausted under any max_attempts).
MAX_ATTEMPT_COUNT = 2**31 - 1
# Longer digit strings are clamped without being converted (int() refuses over 4300 digits, and the
# conversion is quadratic below that).
_MAX_DIGITS = 20


def clamped_int(value: object, lo: int, hi: int) -> int | None:
    """A decimal integer property clamped to ``[lo, hi]``; None when the value is not one (garbage)."""
    if not isinstance(value, str):
        return None
    s = value.strip()
    digits = s[1:] if s[:1] in ("+", "-") else s
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    significant = digits.lstrip("0") or "0"
    n = hi + 1 if len(significant) > _MAX_DIGITS else int(significant)  # never int() of a huge string
    return min(hi, max(lo, -n if s[:1] == "-" else n))


def attempts_so_far(properties: Mapping[str, str]) -> int:
    """How many attempts were made before this delivery (``RECONSUMETIMES``): garbage counts as 0, a count
    beyond MAX_ATTEMPT_COUNT as MAX_ATTEMPT_COUNT."""
    n = clamped_int(properties.get(m.RECONSUMETIMES), 0, MAX_ATTEMPT_COUNT)
    return 0 if n is None else n


def first_seen_ms(properties: Mapping[str, str], *, publish_ms: int, now_ms: int) -> int:
    """When the first copy was published: ``first_seen_ms`` clamped to ``now_ms``; when absent or not a
    positive integer, the publish time (or now, without one)."""
    fallback = publish_ms if 0 < publish_ms <= now_ms else now_ms
    n = clamped_int(properties.get(m.FIRST_SEEN_MS), 0, now_ms)
    return n if n else fallback
