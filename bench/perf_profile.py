"""Where a broker's CPU goes at pulsar-perf's maximum rate, stock against the extension: the standalone pair of
``bench.perf_cost`` (same instances, ports and knobs), each side warmed, then four maximum-rate runs in the order
stock, extension, extension, stock (a warm-up trend then weighs on both sides alike). By default each side is
warmed at the maximum rate and nothing else runs between the maximum-rate runs; ``BENCH_PROFILE_WARMUP=fixed``
warms as ``bench.perf_cost`` does (10 s at the fixed rate) and ``BENCH_PROFILE_SEQUENCE=fixed,max,trim`` runs each
side's steps as ``bench.perf_cost`` does (its fixed-rate row before the maximum, its trim step after), so the
two benches can be told apart step by step. Per run: pulsar-perf's throughput, the broker JVM's CPU seconds
(``/proc``) per million messages sent, and a Java Flight Recorder CPU profile of 20 s of the run (``jcmd
JFR.start settings=profile``): its execution samples, and how many of them have a frame of the extension
(``org.ledgerdeletion``) on their stack.

``python -m bench.perf_profile``; the recordings and pulsar-perf's output under ``bench/out/perf-profile-<run>/``.
It keeps no JSON: what it prints is read beside a ``bench.perf_cost`` run (bench/results/LOG.md).
"""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench import extension as ext
from bench import perf_cost as pc
from bench.env import OUT

ORDER = ("stock", "extension", "extension", "stock")
JFR_DELAY_S = 8
JFR_SECONDS = 20


def cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far (``/proc/<pid>/stat``, in clock ticks of 1/100 s)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0


def jfr_samples(recording: Path) -> tuple[int, int]:
    """The recording's execution samples, and those with a frame of the extension on their stack."""
    text = subprocess.run(
        ["jfr", "print", "--events", "jdk.ExecutionSample", "--stack-depth", "64", str(recording)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    events = text.split("jdk.ExecutionSample")[1:]
    return len(events), sum(1 for e in events if re.search(r"\borg\.ledgerdeletion\.", e))


def main() -> int:
    k = pc.Knobs.from_env()
    warmup = os.environ.get("BENCH_PROFILE_WARMUP", "max")
    if warmup not in ("max", "fixed"):
        raise SystemExit(f"BENCH_PROFILE_WARMUP: max or fixed, not {warmup!r}")
    # The steps of each run: the maximum always; the fixed-rate row before it, the trim step after it.
    sequence = os.environ.get("BENCH_PROFILE_SEQUENCE", "max").split(",")
    if "max" not in sequence or set(sequence) - {"fixed", "max", "trim"}:
        raise SystemExit(f"BENCH_PROFILE_SEQUENCE: max, with fixed and trim if wanted (fixed,max,trim), not {sequence}")
    out = OUT / f"perf-profile-{uuid.uuid4().hex[:8]}"
    out.mkdir(parents=True, exist_ok=True)
    stacks, started = ext.bring_up(pc.PAIR)
    try:
        sides = {m: pc.Side(stacks[m], [], [stacks[m].admin_url]) for m in pc.MODES}
        pids = {
            m: int((Path(ext.instance_env(m, pc.PAIR)["STACK_DIR"]) / "run" / "pulsar.pid").read_text())
            for m in pc.MODES
        }
        if warmup == "fixed":
            asyncio.run(pc.warm_up(sides, k, out, "profile"))
        else:
            for m, side in sides.items():
                pc.produce_consume(side, f"persistent://public/default/prof-warm-{m}", k.max_rate, k, out, f"warm-{m}")
        for i, m in enumerate(ORDER):
            topic = f"persistent://public/default/prof-{out.name}-{i}-{m}"
            if "fixed" in sequence:
                pc.produce_consume(sides[m], f"{topic}-fixed", k.rate, k, out, f"{i}-{m}-fixed")
            c0, w0 = cpu_seconds(pids[m]), time.monotonic()
            with ThreadPoolExecutor(1) as pool:
                running = pool.submit(pc.produce_consume, sides[m], topic, k.max_rate, k, out, f"{i}-{m}")
                time.sleep(JFR_DELAY_S)
                recording = out / f"{i}-{m}.jfr"
                subprocess.run(
                    [
                        "jcmd",
                        str(pids[m]),
                        "JFR.start",
                        f"duration={JFR_SECONDS}s",
                        "settings=profile",
                        f"filename={recording}",
                    ],
                    check=True,
                    capture_output=True,
                )
                res = running.result()
            c1, w1 = cpu_seconds(pids[m]), time.monotonic()
            time.sleep(2)  # the recording is written when its duration ends
            samples, ours = jfr_samples(recording)
            f = res["figures"]
            sent = f["sent"] or 0
            per_million = (c1 - c0) / sent * 1e6 if sent else float("nan")
            print(
                f"[profile] run {i + 1} {m:<9}: {f['throughput'] or 0:,.0f} msg/s, {sent:,.0f} sent; broker CPU "
                f"{c1 - c0:.1f} s in {w1 - w0:.1f} s, {per_million:.2f} s per million messages; JFR {samples} "
                f"samples, {ours} with an org.ledgerdeletion frame; errors {res['errors']}",
                flush=True,
            )
            if "trim" in sequence:
                sample, _ = asyncio.run(ext.trims(sides[m].stack, f"public/prof-{out.name}-{i}-{m}", k.trim_knobs()))
                print(f"[profile]   then trims: {sample.figures.get('trims_per_s') or 0:.1f} trims/s", flush=True)
    finally:
        ext.bring_down(started, pc.PAIR)
    print(
        f"compared against: stock brokers on the standalone pair of bench.perf_cost, in the order {', '.join(ORDER)}; "
        f"warm-up at the {warmup} rate, each run's steps {', '.join(sequence)}"
    )
    print(f"recordings and pulsar-perf output: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
