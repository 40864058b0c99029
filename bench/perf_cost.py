"""The broker extension's cost under a real client: stock brokers vs brokers with the extension, under Pulsar's own
load generator, side by side in one run, on the standalone profile and on the cluster profile.

``make bench-extension-perf`` (or ``python -m bench.perf_cost``). The load is ``pulsar-perf`` of the 4.0.8
distribution the stack runs (``deploy/local/.cache/apache-pulsar-4.0.8/bin/pulsar-perf``), nothing else; every
broker runs with Pulsar's own rollover defaults (``bench.extension.PULSAR_ROLLOVER`` as ``BROKER_CONF``: ledgers
roll after 50,000 entries or 10 to 240 minutes, so no data-path row rolls or trims a ledger):

- ``standalone``: two standalone instances of its own, stock brokers (``BROKER_EXTENSION=0``,
  ``deploy/local/.data-bench-perf-stock``) and the extension's (``BROKER_EXTENSION=1``,
  ``deploy/local/.data-bench-perf-extension``), same config and heap (``bench.extension``'s instance management;
  ports and data directories moved with ``LDW_BENCH_PERF_STOCK_<VAR>`` / ``LDW_BENCH_PERF_EXT_<VAR>``);
- ``cluster``: one cluster-profile instance of its own (one ZooKeeper, two bookies, two brokers;
  ``deploy/local/.data-bench-perf-cluster``, ports apart from the cluster profile's, moved with
  ``LDW_BENCH_PERF_CLUSTER_<VAR>``) whose two brokers are stopped and started again with ``BROKER_EXTENSION=0``
  or ``1`` between the sides (``stack.sh stop broker1``, ``start broker1``, ...): both sides share the bookies
  and ZooKeeper.

Per side, in rounds alternated A/B then B/A (``BENCH_PERF_ROUNDS``), each on a fresh topic:

- ``fixed``: ``pulsar-perf consume`` on the topic, then ``pulsar-perf produce`` at ``BENCH_PERF_RATE`` msg/s of
  ``BENCH_PERF_SIZE`` bytes for ``BENCH_PERF_SECONDS``, its client's pending messages bounded to
  ``BENCH_PERF_CLIENT_MEMORY`` (pulsar-perf's defaults otherwise: batching of 1 ms, one producer, a 1 s warm-up
  left out of its latency); once the subscription's backlog is drained the consumer is
  stopped (SIGTERM: it prints its aggregated stats). Figures: pulsar-perf's own aggregated publish latency
  p50/p99/p99.9 (send to acknowledgement), throughput (its aggregated count of acknowledged messages over
  ``BENCH_PERF_SECONDS``, or over its own elapsed time when it overran that, blocked on a full queue: its own
  aggregated msg/s divides by the time to its exit, which its 10 s report loop rounds up; kept as
  ``perf_rate``), and the consumer's aggregated end-to-end latency p50/p99 (publish time to receive, in whole
  ms);
- ``max``: the same with the rate at ``BENCH_PERF_MAX_RATE`` (pulsar-perf's rate limiter cannot be off; the
  default is far above what this machine reaches, so the producer runs as fast as the client's pending queue
  lets it);
- ``trim``: ``bench.extension.trims`` (``BENCH_PERF_TRIM_TOPICS`` topics of ``BENCH_PERF_TRIM_LEDGERS`` closed
  ledgers, each closed by unloading the topic, retention set to 0, every topic trimmed at once through the admin
  API): trims/s and trim call p50/p99. The trim window of the brokers' logs gives the split (``trim_split_ms``):
  each call's request to the ledger list written ("End TrimConsumedLedgers") and on to its response and, on the
  extension's side, the request to "marking first", the wait until its ledgers' last "pending deletion durable"
  (``mark_wait``: what PIP-186's order adds before the metadata update), and on to the list written.

Prints, per profile and figure, stock, extension (the median of the rounds' values: pulsar-perf prints
percentiles, not samples, so latencies are the median of each round's percentile) and extension/stock, with the
per-round paired ratios; checks the goals at the fixed rate (publish p99 at most ``GOAL_P99`` x stock, throughput
at least ``GOAL_THROUGHPUT`` x stock: met or missed); saves the run as JSON under ``bench/results/``
(``BENCH_RESULTS_DIR``), pulsar-perf's output and histogram files under ``bench/out/perf-<run>/``. Instances this
run started are stopped at the end and their data dropped, their logs kept (``Profile.down_dropping_data``).

Knobs: ``BENCH_PERF_PROFILES`` (standalone,cluster), ``BENCH_PERF_ROUNDS`` (2), ``BENCH_PERF_RATE`` (1000),
``BENCH_PERF_MAX_RATE`` (1000000), ``BENCH_PERF_SIZE`` (1024), ``BENCH_PERF_SECONDS`` (30),
``BENCH_PERF_TRIM_TOPICS`` (20), ``BENCH_PERF_TRIM_LEDGERS`` (6), ``BENCH_PERF_POLICY_WAIT_S`` (2),
``BENCH_PERF_JVM`` (pulsar-perf's heap: ``-Xms256m -Xmx1g -XX:MaxDirectMemorySize=512m``; its static histograms need
more than 256 MB), ``BENCH_PERF_CLIENT_MEMORY`` (``64M``: the producer's ``--memory-limit``, the Pulsar client's own
default; pulsar-perf's 0 lets the client buffer until its heap runs out, and an ``OutOfMemoryError`` in its write
path sends the broker a cut frame: "Failed to verify checksum", then the connection closed).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import extension as ext
from bench.env import OUT, RESULTS, int_knob
from bench.run import _git_head, _loadavg, _machine
from bench.stats import sample_quantiles
from testkit.stack import REPO, Profile, Stack, healthy, stack_of

PERF = REPO / "deploy" / "local" / ".cache" / "apache-pulsar-4.0.8" / "bin" / "pulsar-perf"
MODES = ext.MODES
PROFILES = ("standalone", "cluster")
GOAL_P99 = 1.1  # fixed rate: the extension's publish p99 at most this times stock's
GOAL_THROUGHPUT = 0.95  # fixed rate: its msg/s at least this times stock's

PAIR = ext.Pair(
    placements={
        "stock": {
            "STACK_DIR": str(REPO / "deploy" / "local" / ".data-bench-perf-stock"),
            "WEB_PORT": "28290",
            "BROKER_PORT": "26860",
            "BOOKIE_PORT": "23390",
            "BOOKIE_HTTP_PORT": "28210",
            "ZK_PORT": "22390",
            "S3_PORT": "25210",
            "BROKER_EXTENSION": "0",
        },
        "extension": {
            "STACK_DIR": str(REPO / "deploy" / "local" / ".data-bench-perf-extension"),
            "WEB_PORT": "29290",
            "BROKER_PORT": "27860",
            "BOOKIE_PORT": "24390",
            "BOOKIE_HTTP_PORT": "29210",
            "ZK_PORT": "24391",
            "S3_PORT": "25220",
            "BROKER_EXTENSION": "1",
        },
    },
    prefixes={"stock": "LDW_BENCH_PERF_STOCK_", "extension": "LDW_BENCH_PERF_EXT_"},
    ledgers="pulsar",
    lock="perf-cost",
)

# The cluster instance: every port apart from the cluster profile's (8081/8082, 6651/6652, 3182/3183, 8001/8002
# and their metrics ports 8101/8102, 2191, 5010) and from the pair's.
CLUSTER_PLACEMENT = {
    "STACK_DIR": str(REPO / "deploy" / "local" / ".data-bench-perf-cluster"),
    "ZK_PORT": "22491",
    "WEB_PORT": "28481",
    "WEB_PORT_2": "28482",
    "BROKER_PORT": "26951",
    "BROKER_PORT_2": "26952",
    "BOOKIE_PORT": "23482",
    "BOOKIE_PORT_2": "23483",
    "BOOKIE_HTTP_PORT": "28401",
    "BOOKIE_HTTP_PORT_2": "28402",
    "S3_PORT": "25410",
    "CLUSTER_NAME": "ldw-bench-perf",
    "S3_BUCKET": "pulsar-offload-bench-perf",
}
BROKERS = ("broker1", "broker2")


@dataclass(frozen=True)
class Knobs:
    profiles: tuple[str, ...]
    rounds: int
    rate: int
    max_rate: int
    size: int
    seconds: int
    trim_topics: int
    trim_ledgers: int
    policy_wait_s: float
    jvm: str
    client_memory: str

    @classmethod
    def from_env(cls) -> Knobs:
        profiles = tuple(p for p in os.environ.get("BENCH_PERF_PROFILES", ",".join(PROFILES)).split(",") if p)
        if not profiles or set(profiles) - set(PROFILES):
            raise SystemExit(f"BENCH_PERF_PROFILES: a comma-separated subset of {','.join(PROFILES)}")
        return cls(
            profiles=profiles,
            rounds=int_knob("BENCH_PERF_ROUNDS", 2, 1, 50),
            rate=int_knob("BENCH_PERF_RATE", 1000, 1, 10_000_000),
            max_rate=int_knob("BENCH_PERF_MAX_RATE", 1_000_000, 1, 100_000_000),
            size=int_knob("BENCH_PERF_SIZE", 1024, 1, 4 * 1024 * 1024),
            seconds=int_knob("BENCH_PERF_SECONDS", 30, 5, 3600),
            trim_topics=int_knob("BENCH_PERF_TRIM_TOPICS", 20, 1, 1000),
            trim_ledgers=int_knob("BENCH_PERF_TRIM_LEDGERS", 6, 1, 100),
            policy_wait_s=float(os.environ.get("BENCH_PERF_POLICY_WAIT_S", "2")),
            jvm=os.environ.get("BENCH_PERF_JVM", "-Xms256m -Xmx1g -XX:MaxDirectMemorySize=512m"),
            client_memory=_client_memory(os.environ.get("BENCH_PERF_CLIENT_MEMORY", "64M")),
        )

    def trim_knobs(self) -> ext.Knobs:
        """bench.extension's knobs for its trim workload: Pulsar's rollover (ledgers closed by unloading)."""
        return ext.Knobs(
            rounds=self.rounds,
            msgs=0,
            batched_msgs=0,
            size=self.size,
            window=0,
            rate=0,
            paced_msgs=0,
            trim_topics=self.trim_topics,
            trim_ledgers=self.trim_ledgers,
            policy_wait_s=self.policy_wait_s,
            ledgers="pulsar",
        )


def _client_memory(v: str) -> str:
    if not re.fullmatch(r"[1-9][0-9]*[KMG]?", v):
        raise SystemExit(f"BENCH_PERF_CLIENT_MEMORY: a size such as 64M (pulsar-perf's --memory-limit), not {v!r}")
    return v


# ---------------------------------------------------------------------------------------------- pulsar-perf output

_NUM = r"\s*(-?[0-9.]+|NaN)"
_PRODUCED = re.compile(r"Aggregated throughput stats --- (\d+) records sent ---" + _NUM + " msg/s")
_RECEIVED = re.compile(r"Aggregated throughput stats --- (\d+) records received ---" + _NUM + " msg/s")
_LATENCY = re.compile(
    r"Aggregated latency stats --- Latency: mean:"
    + _NUM
    + r" ms - med:"
    + _NUM
    + r" - 95pct:"
    + _NUM
    + r" - 99pct:"
    + _NUM
    + r" - 99\.9pct:"
    + _NUM
    + r" - 99\.99pct:"
    + _NUM
    + r" - 99\.999pct:"
    + _NUM
    + r" - Max:"
    + _NUM
)
_LATENCY_KEYS = ("mean", "p50", "p95", "p99", "p99.9", "p99.99", "p99.999", "max")


def parse_aggregated(text: str) -> dict[str, float]:
    """pulsar-perf's (4.0.8) aggregated lines, printed by ``produce`` and ``consume`` at exit: the message count
    and rate (``count``, ``rate``) and the latency percentiles (milliseconds: the producer prints them with
    three decimals, the consumer in whole milliseconds). Keys missing when a line is missing."""
    out: dict[str, float] = {}
    m = _PRODUCED.search(text) or _RECEIVED.search(text)
    if m:
        out["count"] = float(m.group(1))
        out["rate"] = float(m.group(2))
    m = _LATENCY.search(text)
    if m:
        out.update({k: float(v) for k, v in zip(_LATENCY_KEYS, m.groups(), strict=True)})
    return out


def throughput(produced: Mapping[str, float], seconds: int) -> float | None:
    """Messages acknowledged per second of the run: over ``seconds`` (``-time``), unless the producer overran it
    (blocked on a full queue it cannot look at the clock; pulsar-perf's own elapsed time, count / its msg/s,
    then exceeds the duration by more than its 10 s report loop's rounding): then over that elapsed time."""
    count, rate = produced.get("count"), produced.get("rate")
    if count is None:
        return None
    elapsed = count / rate if rate else 0.0
    return count / (elapsed if elapsed > seconds + 11 else seconds)


# ---------------------------------------------------------------------------------------------- the mark split

_LOG_TS = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d,\d{3}[+-]\d{4})")
_LEDGER = re.compile(r"\bLEDGER:(\d+)\b")


def _ts(line: str) -> float | None:
    m = _LOG_TS.match(line)
    if not m:
        return None
    return datetime.strptime(m.group(1).replace(",", "."), "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()


def mark_waits_ms(log_text: str, namespace: str = "") -> list[float]:
    """From the extension broker's log: for each metadata write that drops a topic's ledgers ("metadata write drops
    N ledger copies: marking first [...]", a trim's; writes that drop a cursor's ledger and topics outside
    ``namespace`` are left out), the milliseconds until the last of its ledgers' "pending deletion durable" lines:
    the wait PIP-186's order puts before the metadata update. Writes whose marks are not all durable in the text
    are left out."""
    durable: dict[int, float] = {}
    writes: list[tuple[float, list[int]]] = []
    for line in log_text.splitlines():
        if "[ledger-deletion]" not in line:
            continue
        t = _ts(line)
        if t is None:
            continue
        if "marking first" in line:
            drops = line.split("marking first", 1)[1]
            if " cursor " not in drops and f"persistent://{namespace}" in drops:
                writes.append((t, [int(x) for x in _LEDGER.findall(drops)]))
        elif "pending deletion durable:" in line:
            m = _LEDGER.search(line.split("pending deletion durable:", 1)[1])
            if m:
                durable.setdefault(int(m.group(1)), t)
    out = []
    for t0, ids in writes:
        if ids and all(i in durable for i in ids):
            out.append((max(durable[i] for i in ids) - t0) * 1000)
    return out


_TRIM_REQUEST = re.compile(r'"POST /admin/v2/persistent/(\S+?)/trim(?:\?\S*)? HTTP/[0-9.]+" 200 .* (\d+)\s*$')
_TRIM_END = re.compile(r"\] INFO .*ManagedLedgerImpl - \[(\S+)\] End TrimConsumedLedgers")
_MARKING = re.compile(r"\[ledger-deletion\] \[(\S+)\] metadata write drops")


def _topic_of(managed_ledger: str) -> str:
    """``tenant/ns/persistent/local`` (a managed ledger's name) as ``tenant/ns/local`` (the admin path's)."""
    return managed_ledger.replace("/persistent/", "/", 1)


def trim_split_ms(log_text: str, namespace: str) -> dict[str, list[float]]:
    """Where each trim call of ``namespace``'s topics spent its time, from the owner broker's log: its request
    line (Jetty's, at the response, with the call's milliseconds last: the start is that much earlier), Pulsar's
    "End TrimConsumedLedgers" (the ledger list written) and, with the extension, the write's "marking first" and
    its ledgers' last "pending deletion durable". Per phase, one value per trim (milliseconds):
    ``call`` (request to response), ``to_update_done`` (request to the list written), ``after_update`` (list
    written to response) and, with the extension, ``to_marking`` (request to the marks sent), ``mark_wait``
    (marks sent to the last durable) and ``update`` (last durable to the list written)."""
    ns = namespace.rstrip("/") + "/"
    durable: dict[int, float] = {}
    marking: dict[str, list[tuple[float, list[int]]]] = {}
    ends: dict[str, list[float]] = {}
    responses: list[tuple[str, float, float]] = []
    for line in log_text.splitlines():
        t = _ts(line)
        if t is None:
            continue
        if (m := _TRIM_REQUEST.search(line)) and m.group(1).startswith(ns):
            responses.append((m.group(1), t, float(m.group(2))))
        elif (m := _TRIM_END.search(line)) and m.group(1).startswith(ns):
            ends.setdefault(_topic_of(m.group(1)), []).append(t)
        elif "[ledger-deletion]" in line and "marking first" in line:
            m = _MARKING.search(line)
            drops = line.split("marking first", 1)[1]
            if m and m.group(1).startswith(ns) and " cursor " not in drops:
                marking.setdefault(_topic_of(m.group(1)), []).append((t, [int(x) for x in _LEDGER.findall(drops)]))
        elif "pending deletion durable:" in line and (m := _LEDGER.search(line.split("durable:", 1)[1])):
            durable.setdefault(int(m.group(1)), t)
    out: dict[str, list[float]] = {}

    def add(k: str, v: float) -> None:
        out.setdefault(k, []).append(v * 1000)

    # The log's timestamps and the request's duration are whole milliseconds: a call's own lines lie within it.
    slack = 0.002
    for topic, t_resp, call_ms in responses:
        start = t_resp - call_ms / 1000
        out.setdefault("call", []).append(call_ms)
        end = max((t for t in ends.get(topic, []) if start - slack <= t <= t_resp + slack), default=None)
        if end is None:
            continue
        add("to_update_done", end - start)
        add("after_update", t_resp - end)
        marks = [x for x in marking.get(topic, []) if start - slack <= x[0] <= end + slack]
        if marks:
            t_mark, ids = marks[-1]
            if ids and all(i in durable for i in ids):
                last = max(durable[i] for i in ids)
                add("to_marking", t_mark - start)
                add("mark_wait", last - t_mark)
                add("update", end - last)
    return out


class LogWindow:
    """The text a set of log files gains from now on (the broker logs to ``<name>.out`` or ``<name>.log``)."""

    def __init__(self, files: list[Path]) -> None:
        self.start = {f: f.stat().st_size if f.exists() else 0 for f in files}

    def text(self) -> str:
        parts = []
        for f, off in self.start.items():
            if f.exists():
                with open(f, "rb") as fh:
                    fh.seek(off)
                    parts.append(fh.read().decode(errors="replace"))
        return "\n".join(parts)


# ---------------------------------------------------------------------------------------------- one side


@dataclass
class Side:
    """Where one side's load goes: the client's addresses and the broker logs to read the marks from."""

    stack: Stack
    logs: list[Path]
    admin_urls: list[str] = field(default_factory=list)


def _perf(args: list[str], out: Path, k: Knobs) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PULSAR_EXTRA_OPTS": k.jvm, "PULSAR_LOG_DIR": str(out.parent)}
    env.pop("PULSAR_MEM", None)
    fh = open(out, "wb")
    return subprocess.Popen([str(PERF), *args], stdout=fh, stderr=subprocess.STDOUT, env=env, start_new_session=True)


def _backlog(admin_url: str, topic: str) -> int | None:
    path = topic.replace("persistent://", "persistent/")
    try:
        with urllib.request.urlopen(f"{admin_url}/admin/v2/{path}/stats", timeout=10) as r:
            st = json.loads(r.read())
    except OSError:
        return None
    subs = st.get("subscriptions", {})
    return int(subs["sub"]["msgBacklog"]) if "sub" in subs else None


def _wait_for(proc: subprocess.Popen[bytes], path: Path, needle: str, timeout: float) -> bool:
    """``needle`` in ``proc``'s output; False when it exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and needle in path.read_text(errors="replace"):
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.5)
    return False


def produce_consume(side: Side, topic: str, rate: int, k: Knobs, out_dir: Path, tag: str) -> dict[str, Any]:
    """A pulsar-perf consumer, then a pulsar-perf producer on ``topic``; the consumer is stopped (its shutdown
    hook prints the aggregated stats) once the backlog is drained or 30 s after the producer ends."""
    errors: list[str] = []
    c_out, p_out = out_dir / f"{tag}-consume.txt", out_dir / f"{tag}-produce.txt"
    url = side.stack.service_url
    consumer = _perf(["consume", "-u", url, "-ss", "sub", "-sp", "Earliest", "-q", "1000", topic], c_out, k)
    try:
        if not _wait_for(consumer, c_out, "Start receiving from", 120):
            errors.append("pulsar-perf consume did not subscribe within 120 s")
        producer = _perf(
            [
                "produce",
                "-u",
                url,
                "-r",
                str(rate),
                "-s",
                str(k.size),
                "-time",
                str(k.seconds),
                # Pulsar's client bounds its pending messages to 64 MB unless told otherwise; pulsar-perf tells it
                # 0 (no bound), and at the maximum rate its heap then filled whichever side's publish latency grew
                # first, until an OutOfMemoryError mid-write cut a frame and the broker closed the connection.
                "--memory-limit",
                k.client_memory,
                "--histogram-file",
                str(out_dir / f"{tag}-produce.hgrm"),
                topic,
            ],
            p_out,
            k,
        )
        try:
            rc = producer.wait(timeout=k.seconds + 180)
        except subprocess.TimeoutExpired:
            os.killpg(producer.pid, signal.SIGTERM)
            rc = producer.wait(timeout=60)
            errors.append(f"pulsar-perf produce still running {k.seconds + 180} s after its start")
        if rc != 0:
            errors.append(f"pulsar-perf produce exited {rc}")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if any(_backlog(a, topic) == 0 for a in side.admin_urls):
                break
            time.sleep(0.5)
        else:
            errors.append("the consumer's backlog was not drained 30 s after the producer ended")
    finally:
        if consumer.poll() is None:
            os.killpg(consumer.pid, signal.SIGTERM)
        try:
            consumer.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(consumer.pid, signal.SIGKILL)
            consumer.wait()
    p_text = p_out.read_text(errors="replace")
    if "OutOfMemoryError" in p_text:
        errors.append(f"pulsar-perf produce ran out of heap (BENCH_PERF_JVM, BENCH_PERF_CLIENT_MEMORY): {p_out}")
    p = parse_aggregated(p_text)
    c = parse_aggregated(c_out.read_text(errors="replace"))
    if "p99" not in p or "rate" not in p:
        errors.append(f"no aggregated stats in {p_out}")
    if "p99" not in c:
        errors.append(f"no aggregated stats in {c_out}")
    if p.get("count") and c.get("count") is not None and c["count"] < p["count"]:
        errors.append(f"consumed {c['count']:.0f} of {p['count']:.0f} messages")
    return {
        "figures": {
            # Sent (acknowledged) over the test's duration: pulsar-perf's own aggregated msg/s divides by the time to
            # its exit, which its 10 s report loop rounds up (a 30 s run is divided by up to 40 s).
            "throughput": throughput(p, k.seconds),
            "perf_rate": p.get("rate"),
            "publish.p50": p.get("p50"),
            "publish.p99": p.get("p99"),
            "publish.p99.9": p.get("p99.9"),
            "e2e.p50": c.get("p50"),
            "e2e.p99": c.get("p99"),
            "sent": p.get("count"),
            "received": c.get("count"),
        },
        "errors": errors,
    }


async def trim(side: Side, mode: str, namespace: str, k: Knobs) -> dict[str, Any]:
    window = LogWindow(side.logs)
    sample, dropped = await ext.trims(side.stack, namespace, k.trim_knobs())
    await asyncio.sleep(1)  # the log's last lines flushed
    text = window.text()
    waits = mark_waits_ms(text, namespace + "/") if mode == "extension" else []
    split = trim_split_ms(text, namespace)
    calls = sample.latencies_ms.get("trim", [])
    q = sample_quantiles(calls, (0.5, 0.99)) if calls else {}
    w = sample_quantiles(waits, (0.5, 0.99)) if waits else {}
    return {
        "figures": {
            "trims_per_s": sample.figures.get("trims_per_s"),
            "ledgers_per_s": sample.figures.get("ledgers_per_s"),
            "trim.p50": q.get("p50"),
            "trim.p99": q.get("p99"),
            "mark_wait.p50": w.get("p50"),
            "mark_wait.p99": w.get("p99"),
            "mark_writes": float(len(waits)),
            **{f"split.{k}.p50": sample_quantiles(v, (0.5,))["p50"] for k, v in split.items() if v and k != "call"},
        },
        "split_ms": split,
        "trim_ms": calls,
        "mark_wait_ms": waits,
        "dropped": len(dropped),
        "errors": sample.errors,
    }


async def run_side(side: Side, mode: str, prof: str, r: int, run_id: str, k: Knobs, out_dir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for wl, rate in (("fixed", k.rate), ("max", k.max_rate)):
        topic = f"persistent://public/default/ldw-perf-{run_id}-{prof}-{wl}-{mode}-r{r}"
        res[wl] = await asyncio.to_thread(produce_consume, side, topic, rate, k, out_dir, f"{prof}-{wl}-{mode}-r{r}")
    res["trim"] = await trim(side, mode, f"public/ldw-perf-{run_id}-{prof}-{mode}-r{r}", k)
    for wl, x in res.items():
        figs = ", ".join(f"{n} {v:,.2f}" for n, v in x["figures"].items() if v is not None)
        print(f"[bench] {prof} round {r + 1}/{k.rounds} {wl:<5} {mode:<9} {figs}", flush=True)
        for e in x["errors"]:
            print(f"[bench]   ERROR {e}", flush=True)
    return res


# ---------------------------------------------------------------------------------------------- the profiles


def _standalone_logs(pair_env: Mapping[str, str]) -> list[Path]:
    d = Path(pair_env["STACK_DIR"]) / "logs"
    return [d / "pulsar.out", d / "pulsar-standalone.log"]


async def run_standalone(run_id: str, k: Knobs, out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    for m in MODES:
        if healthy(ext.instance(m, PAIR).addresses()):
            raise SystemExit(
                f"the {m} instance ({ext.instance_env(m, PAIR)['STACK_DIR']}) is already up: its config is not "
                "known to be this run's; stop it (PROFILE=standalone STACK_DIR=... stack.sh down)"
            )
    print("[bench] standalone: bringing up a stock instance and an extension instance ...", flush=True)
    stacks, started = ext.bring_up(PAIR)
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    try:
        sides = {m: Side(stacks[m], _standalone_logs(ext.instance_env(m, PAIR)), [stacks[m].admin_url]) for m in MODES}
        await warm_up(sides, k, out_dir, "standalone")
        for r in range(k.rounds):
            for m in MODES if r % 2 == 0 else tuple(reversed(MODES)):
                samples[m].append(await run_side(sides[m], m, "standalone", r, run_id, k, out_dir))
    finally:
        ext.bring_down(started, PAIR)
    return samples


async def warm_up(sides: Mapping[str, Side], k: Knobs, out_dir: Path, prof: str) -> None:
    """A short pulsar-perf run per side, not measured: the brokers' JITs and the clients' first lookups."""
    short = dataclasses.replace(k, seconds=10)
    for m, side in sides.items():
        await asyncio.to_thread(
            produce_consume,
            side,
            f"persistent://public/default/ldw-perf-warmup-{prof}-{m}",
            k.rate,
            short,
            out_dir,
            f"{prof}-warmup-{m}",
        )


def cluster_instance() -> Profile:
    placement = {**CLUSTER_PLACEMENT, "BROKER_CONF": ext.rollover_conf()}
    return Profile("cluster", placement, prefix="LDW_BENCH_PERF_CLUSTER_")


def _cluster_sh(*args: str, extension: str, timeout: float = 900) -> None:
    r = cluster_instance().run(*args, timeout=timeout, BROKER_EXTENSION=extension)
    if r.returncode != 0:
        raise RuntimeError(f"PROFILE=cluster stack.sh {' '.join(args)} failed:\n{r.stderr[-3000:]}")


def switch_brokers(mode: str) -> float:
    """Both brokers stopped, then started again as ``mode``'s (the bookies and ZooKeeper stay up); seconds."""
    flag = PAIR.placements[mode]["BROKER_EXTENSION"]
    t = time.monotonic()
    for b in BROKERS:
        _cluster_sh("stop", b, extension=flag)
    for b in BROKERS:
        _cluster_sh("start", b, extension=flag)
    return time.monotonic() - t


async def run_cluster(run_id: str, k: Knobs, out_dir: Path) -> tuple[dict[str, list[dict[str, Any]]], list[float]]:
    prof = cluster_instance()
    env = prof.environ()
    if not Path(env["STACK_DIR"]).name.startswith(".data-bench"):
        raise SystemExit("LDW_BENCH_PERF_CLUSTER_STACK_DIR must name a .data-bench* directory of its own")
    if healthy(prof.addresses()):
        raise SystemExit(f"the cluster instance ({env['STACK_DIR']}) is already up; stop it first")
    prof.run("down", timeout=300)  # what a crashed start of ours left
    shutil.rmtree(env["STACK_DIR"], ignore_errors=True)
    order = [m for r in range(k.rounds) for m in (MODES if r % 2 == 0 else tuple(reversed(MODES)))]
    print(f"[bench] cluster: bringing up one cluster instance, brokers as {order[0]} ...", flush=True)
    _cluster_sh("up", extension=PAIR.placements[order[0]]["BROKER_EXTENSION"])
    samples: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
    switches: list[float] = []
    try:
        addrs = prof.addresses()
        stack = stack_of(addrs)
        logs_dir = Path(env["STACK_DIR"]) / "logs"
        side = Side(
            stack,
            [logs_dir / f"{b}.{x}" for b in BROKERS for x in ("out", "log")],
            [addrs["PULSAR_ADMIN_URL"], addrs["PULSAR_ADMIN_URL_2"]],
        )
        current = order[0]
        await warm_up({current: side}, k, out_dir, "cluster")
        for i, m in enumerate(order):
            if m != current:
                print(f"[bench] cluster: brokers restarted as {m} ...", flush=True)
                switches.append(round(await asyncio.to_thread(switch_brokers, m), 1))
                current = m
                await warm_up({m: side}, k, out_dir, f"cluster-{i}")
            samples[m].append(await run_side(side, m, "cluster", i // 2, run_id, k, out_dir))
    finally:
        prof.down_dropping_data(timeout=300)
    return samples, switches


# ---------------------------------------------------------------------------------------------- report

# (workload, figure, label, unit)
FIGURES: list[tuple[str, str, str, str]] = [
    ("fixed", "publish.p50", "fixed rate: publish latency p50", "ms"),
    ("fixed", "publish.p99", "fixed rate: publish latency p99", "ms"),
    ("fixed", "publish.p99.9", "fixed rate: publish latency p99.9", "ms"),
    ("fixed", "throughput", "fixed rate: throughput", "msg/s"),
    ("fixed", "e2e.p50", "fixed rate: end-to-end latency p50", "ms"),
    ("fixed", "e2e.p99", "fixed rate: end-to-end latency p99", "ms"),
    ("max", "publish.p50", "max rate: publish latency p50", "ms"),
    ("max", "publish.p99", "max rate: publish latency p99", "ms"),
    ("max", "publish.p99.9", "max rate: publish latency p99.9", "ms"),
    ("max", "throughput", "max rate: throughput", "msg/s"),
    ("max", "e2e.p50", "max rate: end-to-end latency p50", "ms"),
    ("max", "e2e.p99", "max rate: end-to-end latency p99", "ms"),
    ("trim", "trims_per_s", "trim: topics trimmed", "trims/s"),
    ("trim", "trim.p50", "trim: trim call p50", "ms"),
    ("trim", "trim.p99", "trim: trim call p99", "ms"),
    ("trim", "mark_wait.p50", "trim: wait for marks durable p50", "ms"),
    ("trim", "mark_wait.p99", "trim: wait for marks durable p99", "ms"),
    ("trim", "split.to_update_done.p50", "trim: request to ledger list written p50", "ms"),
    ("trim", "split.to_marking.p50", "trim: request to marks sent p50", "ms"),
    ("trim", "split.update.p50", "trim: marks durable to list written p50", "ms"),
    ("trim", "split.after_update.p50", "trim: list written to response p50", "ms"),
]


def combine(samples: Mapping[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Per figure: each mode's rounds, their median, the ratio extension/stock of the medians and the paired
    per-round ratios (``bench.extension.paired``)."""
    res: dict[str, dict[str, Any]] = {}
    for wl, fig, _label, unit in FIGURES:
        key = f"{wl}.{fig}"
        res[key] = {}
        for m in MODES:
            rounds = [s[wl]["figures"].get(fig) for s in samples.get(m, [])]
            got = [v for v in rounds if v is not None]
            res[key][m] = {"value": statistics.median(got) if got else None, "rounds": rounds}
        a, b = res[key]["stock"]["value"], res[key]["extension"]["value"]
        res[key]["ratio"] = b / a if a and b is not None else None
        res[key]["paired"] = ext.paired(unit, res[key])
    return res


def goals(res: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    p99 = res["fixed.publish.p99"]["ratio"]
    thr = res["fixed.throughput"]["ratio"]
    return {
        "fixed publish p99 <= 1.1x stock": {"ratio": p99, "met": p99 is not None and p99 <= GOAL_P99},
        "fixed throughput >= 0.95x stock": {"ratio": thr, "met": thr is not None and thr >= GOAL_THROUGHPUT},
    }


def render(prof: str, res: Mapping[str, dict[str, Any]]) -> str:
    head = f"{prof + ': figure':<46} {'unit':<8} {'stock':>10} {'extension':>10} {'ext/stock':>9} {'per round':>22}"
    lines = [head, "-" * len(head)]
    for wl, fig, label, unit in FIGURES:
        x = res[f"{wl}.{fig}"]
        fmt = ".2f" if unit == "ms" else ",.1f"
        a, b = x["stock"]["value"], x["extension"]["value"]
        per = [f"{e / s:.2f}" for s, e in zip(x["stock"]["rounds"], x["extension"]["rounds"], strict=False) if s and e]
        lines.append(
            f"{label:<46} {unit:<8} {_v(a, fmt):>10} {_v(b, fmt):>10} {_v(x['ratio'], '.2f') + 'x':>9} "
            f"{' '.join(per):>22}"
        )
    for name, g in goals(res).items():
        lines.append(f"goal {name}: {_v(g['ratio'], '.2f')}x -> {'met' if g['met'] else 'MISSED'}")
    return "\n".join(lines)


def _v(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


async def amain() -> int:
    k = Knobs.from_env()
    if not PERF.exists():
        raise SystemExit(f"{PERF} missing: make pulsar-dist")
    run_id = uuid.uuid4().hex[:8]
    t0 = time.monotonic()
    meta: dict[str, Any] = {
        "run_id": run_id,
        "bench": "perf_cost",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_head": _git_head(),
        "machine": _machine(),
        "knobs": dataclasses.asdict(k),
        "loadavg_before": _loadavg(),
        "load_generator": str(PERF.relative_to(REPO)),
    }
    out_dir = OUT / f"perf-{run_id}"
    out_dir.mkdir(parents=True, exist_ok=True)
    lock = ext.exclusive(PAIR)
    runs: dict[str, dict[str, Any]] = {}
    for prof in k.profiles:
        t = time.monotonic()
        la = _loadavg()
        if prof == "standalone":
            samples = await run_standalone(run_id, k, out_dir)
            extra: dict[str, Any] = {
                "compared_against": "stock brokers on a standalone instance of their own (BROKER_EXTENSION=0), "
                "same config and heap, beside the extension's instance"
            }
        else:
            samples, switches = await run_cluster(run_id, k, out_dir)
            extra = {
                "compared_against": "the same cluster instance (ZooKeeper, both bookies shared) with both brokers "
                "restarted as stock brokers (BROKER_EXTENSION=0)",
                "broker_switch_s": switches,
            }
        res = combine(samples)
        runs[prof] = {
            "figures": res,
            "goals": goals(res),
            "samples": samples,
            "loadavg_before": la,
            "loadavg_after": _loadavg(),
            "seconds": round(time.monotonic() - t, 1),
            **extra,
        }
        print(flush=True)
        print(render(prof, res), flush=True)
        print(f"compared against: {extra['compared_against']}", flush=True)
        print(f"load average before/after: {la} / {runs[prof]['loadavg_after']}", flush=True)
        print(flush=True)
    meta["loadavg_after"] = _loadavg()
    meta["total_s"] = round(time.monotonic() - t0, 1)
    print(
        f"compared against: stock brokers, alternated with the extension's in {k.rounds} rounds (A/B, B/A); load: "
        f"pulsar-perf 4.0.8 only (produce at {k.rate} msg/s and at -r {k.max_rate}, {k.size} B, {k.seconds} s, "
        f"--memory-limit {k.client_memory}, "
        f"pulsar-perf's defaults otherwise, batching 1 ms; a consume on the same topic), brokers with Pulsar's "
        f"rollover defaults; values = median of the rounds (latencies: of each round's pulsar-perf percentile); "
        f"trims: bench.extension's trim workload, {k.trim_topics} topics x {k.trim_ledgers} closed ledgers"
    )
    print(f"load average before/after: {meta['loadavg_before']} / {meta['loadavg_after']}; total {meta['total_s']}s")
    errors = [
        f"{prof} {m} round {i + 1} {wl}: {e}"
        for prof, run in runs.items()
        for m, rounds in run["samples"].items()
        for i, s in enumerate(rounds)
        for wl, x in s.items()
        for e in x["errors"]
    ]
    doc = {"meta": meta, "profiles": runs, "errors": errors, "perf_output": str(out_dir.relative_to(REPO))}
    RESULTS.mkdir(parents=True, exist_ok=True)
    kept = RESULTS / f"{meta['started'][:19].replace(':', '')}-perf-cost-{run_id}.json"
    kept.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(f"results: {kept.relative_to(REPO) if kept.is_relative_to(REPO) else kept}")
    lock.close()
    return 1 if errors else 0


def main() -> int:
    return asyncio.run(amain())


if __name__ == "__main__":
    raise SystemExit(main())
