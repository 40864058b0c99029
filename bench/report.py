"""The printed table and ``bench/out/results.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.result import Row


def _f(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1000:.0f}"


COLUMNS = (
    ("measurement", "<", 60),
    ("N", ">", 5),
    ("done", ">", 5),
    ("seconds", ">", 8),
    ("rate/s", ">", 7),
    ("ratio", ">", 6),
    ("vs", "<", 15),
    ("p50ms", ">", 7),
    ("p95ms", ">", 7),
    ("p99ms", ">", 7),
    ("meanms", ">", 6),
    ("RSSMiB", ">", 6),
    ("CPUs", ">", 5),
)


def _lat(r: Row, q: str) -> str:
    v = r.latency_s.get(q)
    if v is None:
        return "-"
    if r.kind == "worker":
        return "inf" if v == float("inf") else f"<={v * 1000:.0f}"
    return _ms(v)


def table(rows: list[Row]) -> str:
    head = "  ".join(f"{name:{align}{width}}" for name, align, width in COLUMNS)
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = (
            r.what,
            str(r.n),
            str(r.completed),
            _f(r.seconds, ".2f"),
            _f(r.rate, ".2f"),
            "-" if r.ratio is None else f"{r.ratio:.2f}x",
            r.baseline or "(baseline)",
            _lat(r, "p50"),
            _lat(r, "p95"),
            _lat(r, "p99"),
            _ms(r.latency_mean_s),
            _f(r.peak_rss_mib, ".0f"),
            _f(r.cpu_s, ".1f"),
        )
        lines.append("  ".join(f"{c:{a}{w}}" for c, (_, a, w) in zip(cells, COLUMNS, strict=True)))
    return "\n".join(lines)


def notes(rows: list[Row], meta: dict[str, Any]) -> str:
    out = []
    c = meta["concurrency"]
    out.append(
        f"compared against: direct bookie HTTP deletes, sequential and concurrent={c}"
        + (f" (zookeeper-mode row: raw ZooKeeper znode deletes, concurrent={c})" if meta.get("zk") else "")
    )
    out.append(
        "ratio = worker rate / raw rate at the same concurrency; worker time = 'worker ready' log line -> "
        "N-th settled message (backlog queued before start, rate limit disabled)"
    )
    out.append(
        "latency: raw rows = per call, measured; worker rows = ledger_deletion_processing_seconds histogram, "
        "'<=x' = upper bound of the bucket the percentile falls in (interpolated values in the JSON), mean exact; "
        "RSSMiB = worker VmHWM (peak RSS); CPUs = worker CPU seconds during the drain"
    )
    by_key = {r.key: r for r in rows}
    seq, conc = by_key.get("raw-bookie-seq"), by_key.get(f"raw-bookie-c{c}")
    if seq and conc and seq.rate and conc.rate and seq.latency_mean_s and conc.latency_mean_s:
        gain = conc.rate / seq.rate
        out.append(
            f"bookie HTTP DELETE costs {seq.latency_mean_s * 1000:.0f} ms per call (mean, sequential); {c} in flight "
            f"changes the rate by x{gain:.2f} while each call waits {conc.latency_mean_s * 1000:.0f} ms (mean)"
            + (": no gain from concurrency, the calls are served one at a time" if gain < 1.3 else "")
        )
    for r in rows:
        if "ratio_vs_raw_bookie" in r.extra:
            out.append(f"{r.key} is x{r.extra['ratio_vs_raw_bookie']} the raw bookie HTTP rate at {c} in flight")
    for r in rows:
        extra = {
            k: v for k, v in r.extra.items() if k in ("outcomes", "rejected", "dlq", "retried", "in_use", "failed")
        }
        line = f"  {r.key}: leftover in BookKeeper={r.leftover}"
        if extra:
            line += f" {extra}"
        if r.errors:
            line += f" ERRORS({len(r.errors)}): {r.errors[:3]}"
        out.append(line)
    out.append(
        f"ledger creation: {meta.get('ledgers_created')} ledgers in {meta.get('create_s')}s (one JVM); "
        f"load average before/after: {meta.get('loadavg_before')} / {meta.get('loadavg_after')}; "
        f"total bench time {meta.get('total_s')}s"
    )
    return "\n".join(out)


def write_json(path: Path, rows: list[Row], meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"meta": meta, "rows": [r.to_json() for r in rows]}, indent=2, default=str) + "\n")


def keep(rows: list[Row], meta: dict[str, Any], label: str) -> Path:
    """Print each row's errors and the load line, then keep the run under ``bench/results/`` (committed:
    one file per run worth keeping, named by its start time, ``label`` and run id)."""
    from bench.env import RESULTS
    from testkit.stack import REPO

    for r in rows:
        if r.errors:
            print(f"  {r.key} ERRORS({len(r.errors)}): {r.errors[:3]}")
    print(f"load average before/after: {meta['loadavg_before']} / {meta['loadavg_after']}; total {meta['total_s']}s")
    name = f"{meta['started'][:19].replace(':', '')}-{label + '-' if label else ''}{meta['run_id']}.json"
    kept = RESULTS / name
    write_json(kept, rows, meta)
    print(f"results: {kept.relative_to(REPO) if kept.is_relative_to(REPO) else kept}")
    return kept
