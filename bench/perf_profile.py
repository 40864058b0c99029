"""Where a broker's CPU goes at pulsar-perf's maximum rate, stock against the extension: the standalone pair of
``bench.perf_cost`` (same instances, ports and knobs), each side warmed at the maximum rate, then four maximum-rate
runs in the order stock, extension, extension, stock (a warm-up trend then weighs on both sides alike), nothing
else between them (no fixed-rate or trim step). Per run: pulsar-perf's throughput, the broker JVM's CPU seconds
(``/proc``) per million messages sent, and a Java Flight Recorder CPU profile of 20 s of the run (``jcmd
JFR.start settings=profile``): its execution samples, and how many of them have a frame of the extension
(``org.ledgerdeletion``) on their stack.

``python -m bench.perf_profile``; the recordings and pulsar-perf's output under ``bench/out/perf-profile-<run>/``.
It keeps no JSON: what it prints is read beside a ``bench.perf_cost`` run (bench/results/LOG.md).
"""

from __future__ import annotations

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
    out = OUT / f"perf-profile-{uuid.uuid4().hex[:8]}"
    out.mkdir(parents=True, exist_ok=True)
    stacks, started = ext.bring_up(pc.PAIR)
    try:
        sides = {m: pc.Side(stacks[m], [], [stacks[m].admin_url]) for m in pc.MODES}
        pids = {
            m: int((Path(ext.instance_env(m, pc.PAIR)["STACK_DIR"]) / "run" / "pulsar.pid").read_text())
            for m in pc.MODES
        }
        for m, side in sides.items():
            pc.produce_consume(side, f"persistent://public/default/prof-warm-{m}", k.max_rate, k, out, f"warm-{m}")
        for i, m in enumerate(ORDER):
            topic = f"persistent://public/default/prof-{out.name}-{i}-{m}"
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
    finally:
        ext.bring_down(started, pc.PAIR)
    print(f"compared against: stock brokers on the standalone pair of bench.perf_cost, in the order {', '.join(ORDER)}")
    print(f"recordings and pulsar-perf output: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
