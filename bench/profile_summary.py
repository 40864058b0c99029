"""A py-spy profile of the daemon, summed per function (``python -m bench.profile_summary FILE.collapsed``).

``BENCH_PYSPY=DIR`` makes a bench row write py-spy's raw collapsed stacks of the daemon; with
``BENCH_PYSPY_GIL=1`` only the thread holding the GIL is sampled, i.e. where the interpreter's CPU goes
(without it idle threads waiting in ``select`` fill the profile). Prints the share of samples per thread,
per function (self) and per function with its callees (inclusive).
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path


def _name(frame: str) -> str:
    # "fn (path/to/file.py:123)" -> "fn (file.py)"
    fn, sep, where = frame.partition(" (")
    return f"{fn} ({where.split(':')[0].rsplit('/', 1)[-1]})" if sep else frame


def summarize(path: Path, top: int = 40) -> str:
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    threads: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_name(f) for f in stack.split(";")]
        threads[frames[0]] += n
        own[frames[-1]] += n
        for f in set(frames):
            inclusive[f] += n
    if total == 0:
        return f"{path}: no samples"

    def pct(n: int) -> str:
        return f"{100 * n / total:5.1f}%"

    out = [f"total samples {total}", "-- by thread (outermost frame) --"]
    out += [f"{pct(n)} {k}" for k, n in threads.most_common(8)]
    out += ["-- self --"] + [f"{pct(n)} {k}" for k, n in own.most_common(top)]
    out += ["-- inclusive --"] + [f"{pct(n)} {k}" for k, n in inclusive.most_common(top)]
    return "\n".join(out)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(summarize(Path(arg)))
