"""Percentiles: exact ones from measured samples, estimated ones from a Prometheus histogram."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

QUANTILES = (0.5, 0.95, 0.99)


def sample_quantiles(values: Sequence[float], qs: Iterable[float] = QUANTILES) -> dict[str, float | None]:
    """Nearest-rank percentiles of measured values (seconds in, seconds out)."""
    s = sorted(values)
    out: dict[str, float | None] = {}
    for q in qs:
        out[f"p{round(q * 100)}"] = s[max(0, math.ceil(q * len(s)) - 1)] if s else None
    return out


def histogram_quantiles(
    buckets: Mapping[float, float], count: float, qs: Iterable[float] = QUANTILES
) -> dict[str, float | None]:
    """Percentiles from cumulative bucket counts ``{upper bound: count}``, interpolated linearly inside the
    bucket as Prometheus' ``histogram_quantile`` does; a rank in the +Inf bucket reports the largest finite
    bound (a lower bound of the truth)."""
    out: dict[str, float | None] = {}
    bounds = sorted(buckets)
    for q in qs:
        key = f"p{round(q * 100)}"
        if count <= 0 or not bounds:
            out[key] = None
            continue
        rank = q * count
        prev_bound, prev_count = 0.0, 0.0
        value: float | None = None
        for b in bounds:
            c = buckets[b]
            if c >= rank:
                if math.isinf(b):
                    value = prev_bound
                elif c == prev_count:
                    value = b
                else:
                    value = prev_bound + (b - prev_bound) * (rank - prev_count) / (c - prev_count)
                break
            prev_bound, prev_count = b, c
        out[key] = value if value is not None else prev_bound
    return out


def histogram_upper_bounds(
    buckets: Mapping[float, float], count: float, qs: Iterable[float] = QUANTILES
) -> dict[str, float | None]:
    """The upper bound of the bucket each percentile falls in: what the histogram proves (p50 <= x)."""
    out: dict[str, float | None] = {}
    for q in qs:
        key = f"p{round(q * 100)}"
        out[key] = None
        if count > 0:
            for b in sorted(buckets):
                if buckets[b] >= q * count:
                    out[key] = b
                    break
    return out
