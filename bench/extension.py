"""The broker extension's cost, side by side: stock brokers vs brokers with the extension, in one run.

``make bench-extension`` (or ``python -m bench.extension``) brings up two standalone stack instances of its
own beside the shared stack (ports and data apart: ``deploy/local/.data-bench-stock`` with
``BROKER_EXTENSION=0``, ``deploy/local/.data-bench-extension`` with ``BROKER_EXTENSION=1``; same config,
same heap) and runs the same workloads on both, alternating in rounds (A/B, then B/A) so that the machine's
noise hits both alike:

- ``non-batched``: a producer without batching, ``BENCH_EXT_MSGS`` messages of ``BENCH_EXT_SIZE`` bytes as
  fast as a window of ``BENCH_EXT_WINDOW`` pending sends allows, a consumer on the same topic receiving and
  acknowledging at the same time: produce msg/s, publish latency p50/p99 (send call to acknowledgement:
  at saturation it includes the window's queueing), end-to-end msg/s (first send to last receive);
- ``batched``: the same with client batching on (its defaults: 10 ms, 1,000 messages), ``BENCH_EXT_BATCHED_MSGS``;
- ``paced``: non-batched at ``BENCH_EXT_RATE`` msg/s (below saturation, so the latency is the broker's,
  not the window's): publish latency p50/p99 and end-to-end latency p50/p99 (publish timestamp to receive);
- ``trim``: ``BENCH_EXT_TRIM_TOPICS`` topics of ``BENCH_EXT_TRIM_LEDGERS`` closed ledgers each, retention
  then set to 0 and every topic trimmed at once through the admin REST API (``.../trim``, as
  ``pulsar-admin topics trim-topic``): trims/s, ledgers dropped per second, trim call p50/p99.

``BENCH_EXT_LEDGERS`` picks the ledgers. ``small`` (the default): the stack's brokers roll a ledger every 5
entries with retention 0 (``config/standalone.conf``): on the data-path rows every consumed ledger is
trimmed while the row runs, so with the extension each of those trims waits for its pending deletions to
be durable: the worst case for the extension, counted per row from the broker's
``ledger_deletion_broker_marked_total``. ``pulsar``: both instances run with Pulsar's own rollover defaults
(``PULSAR_ROLLOVER``, given to the stack as ``BROKER_CONF``): a plain topic as production runs it, whose
ledgers roll after 50,000 entries or 10 to 240 minutes; the trim row then closes each of its ledgers by
unloading the topic. Instances left up by an earlier run (``BENCH_EXT_KEEP=1``) keep the config they
started with. After the rounds, the extension instance's pending
topic is read back: every ledger a trim dropped must be on it.

Prints, for each figure, stock and extension (median of the rounds for rates; pooled samples for
percentiles), the ratio extension/stock and the round-to-round spread it is to be read against; saves
the run as JSON under ``bench/results/`` (``BENCH_RESULTS_DIR``). Instances this run started are stopped
at the end and their data dropped, their logs kept (``BENCH_EXT_KEEP=1`` leaves them up); ports and data
directories can be moved with ``LDW_BENCH_STOCK_<VAR>`` / ``LDW_BENCH_EXT_<VAR>`` (e.g. ``LDW_BENCH_EXT_WEB_PORT``).

Knobs: ``BENCH_EXT_ROUNDS`` (3), ``BENCH_EXT_MSGS`` (2000), ``BENCH_EXT_BATCHED_MSGS`` (50000),
``BENCH_EXT_SIZE`` (1024), ``BENCH_EXT_WINDOW`` (1000), ``BENCH_EXT_RATE`` (200), ``BENCH_EXT_PACED_MSGS``
(1000), ``BENCH_EXT_TRIM_TOPICS`` (20), ``BENCH_EXT_TRIM_LEDGERS`` (6), ``BENCH_EXT_POLICY_WAIT_S`` (2),
``BENCH_EXT_LEDGERS`` (small).
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulsar

from bench.env import OUT, RESULTS, int_knob
from bench.run import _git_head, _loadavg, _machine
from bench.stats import sample_quantiles
from testkit.harness import quiet_logger
from testkit.stack import REPO, STACK, Profile, Stack, admin_for, healthy, stack_of
from worker.broker.admin import NotOwner, PulsarAdmin
from worker.formats.topic_name import TopicName

MODES = ("stock", "extension")
PENDING = "persistent://pulsar/system/__ledger_deletion"  # the extension's default queue
PENDING_PARTITIONS = 4
ENTRIES_PER_LEDGER = 5  # config/standalone.conf: managedLedgerMaxEntriesPerLedger

_COMMON = {
    # Two JVMs beside the shared stacks on 2 cores: the heap the other side-by-side instances use.
    "PULSAR_MEM": "-Xms256m -Xmx768m -XX:MaxDirectMemorySize=512m",
}
INSTANCES: dict[str, dict[str, str]] = {
    "stock": {
        "STACK_DIR": str(REPO / "deploy" / "local" / ".data-bench-stock"),
        "WEB_PORT": "28090",
        "BROKER_PORT": "26660",
        "BOOKIE_PORT": "23190",
        "BOOKIE_HTTP_PORT": "28010",
        "ZK_PORT": "22190",
        "S3_PORT": "25010",
        "BROKER_EXTENSION": "0",
    },
    "extension": {
        "STACK_DIR": str(REPO / "deploy" / "local" / ".data-bench-extension"),
        "WEB_PORT": "29090",
        "BROKER_PORT": "27660",
        "BOOKIE_PORT": "24190",
        "BOOKIE_HTTP_PORT": "29010",
        "ZK_PORT": "24181",
        "S3_PORT": "25020",
        "BROKER_EXTENSION": "1",
    },
}
_PREFIX = {"stock": "LDW_BENCH_STOCK_", "extension": "LDW_BENCH_EXT_"}


# Pulsar 4.0's own broker.conf defaults for ledger and cursor-ledger rollover: a plain topic in production.
PULSAR_ROLLOVER = {
    "managedLedgerMaxEntriesPerLedger": "50000",
    "managedLedgerMinLedgerRolloverTimeMinutes": "10",
    "managedLedgerMaxLedgerRolloverTimeMinutes": "240",
    "managedLedgerCursorMaxEntriesPerLedger": "50000",
    "managedLedgerCursorRolloverTimeInSeconds": "14400",
}


def _ledgers() -> str:
    v = os.environ.get("BENCH_EXT_LEDGERS", "small")
    if v not in ("small", "pulsar"):
        raise SystemExit("BENCH_EXT_LEDGERS must be small (the stack's 5-entry ledgers) or pulsar (its defaults)")
    return v


@dataclass(frozen=True)
class Knobs:
    rounds: int
    msgs: int
    batched_msgs: int
    size: int
    window: int
    rate: int
    paced_msgs: int
    trim_topics: int
    trim_ledgers: int
    policy_wait_s: float
    ledgers: str

    @classmethod
    def from_env(cls) -> Knobs:
        return cls(
            rounds=int_knob("BENCH_EXT_ROUNDS", 3, 1, 50),
            msgs=int_knob("BENCH_EXT_MSGS", 2000, 10, 10_000_000),
            batched_msgs=int_knob("BENCH_EXT_BATCHED_MSGS", 50000, 10, 100_000_000),
            size=int_knob("BENCH_EXT_SIZE", 1024, 1, 4 * 1024 * 1024),
            window=int_knob("BENCH_EXT_WINDOW", 1000, 1, 100_000),
            rate=int_knob("BENCH_EXT_RATE", 200, 1, 100_000),
            paced_msgs=int_knob("BENCH_EXT_PACED_MSGS", 1000, 10, 10_000_000),
            trim_topics=int_knob("BENCH_EXT_TRIM_TOPICS", 20, 1, 1000),
            trim_ledgers=int_knob("BENCH_EXT_TRIM_LEDGERS", 6, 1, 100),
            policy_wait_s=float(os.environ.get("BENCH_EXT_POLICY_WAIT_S", "2")),
            ledgers=_ledgers(),
        )


# ---------------------------------------------------------------------------------------------- instances


def rollover_conf() -> str:
    """``PULSAR_ROLLOVER`` as the stack's ``BROKER_CONF`` (space-separated key=value)."""
    return " ".join(f"{k}={v}" for k, v in PULSAR_ROLLOVER.items())


@dataclass(frozen=True)
class Pair:
    """Two standalone instances side by side, stock brokers and the extension's: their placements (ports, data
    directories, ``BROKER_EXTENSION``), the prefixes of the variables that move them (``<prefix><VAR>``), the
    ledgers they roll (``None``: ``BENCH_EXT_LEDGERS``) and the name of the lock that keeps one run on them."""

    placements: Mapping[str, Mapping[str, str]]
    prefixes: Mapping[str, str]
    ledgers: str | None = None
    lock: str = "extension"


PAIR = Pair(INSTANCES, _PREFIX)  # bench.extension's own


def instance(mode: str, pair: Pair = PAIR) -> Profile:
    """The mode's own instance (``<prefix><VAR>`` sets its ``<VAR>``): stock brokers or the extension, and the
    rollover of the stack or of Pulsar (``BENCH_EXT_LEDGERS``, unless the pair names its ledgers)."""
    placement = {**_COMMON, **pair.placements[mode]}
    if (pair.ledgers or _ledgers()) == "pulsar":
        placement["BROKER_CONF"] = rollover_conf()
    return Profile("standalone", placement, prefix=pair.prefixes[mode])


def instance_env(mode: str, pair: Pair = PAIR) -> dict[str, str]:
    # BROKER_EXTENSION is the one thing that tells them apart: no LDW_BENCH_* variable changes it.
    return instance(mode, pair).environ(BROKER_EXTENSION=pair.placements[mode]["BROKER_EXTENSION"])


def _stack_sh(mode: str, *args: str, pair: Pair = PAIR, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return instance(mode, pair).run(*args, timeout=timeout, BROKER_EXTENSION=pair.placements[mode]["BROKER_EXTENSION"])


def exclusive(pair: Pair = PAIR) -> Any:
    """One run at a time per pair of instances (a second run on the same ports would measure the first's load
    and stop its instances): a lock named after the stock instance's web port, held until exit."""
    import fcntl

    port = instance_env("stock", pair)["WEB_PORT"]
    OUT.mkdir(parents=True, exist_ok=True)
    lock = open(OUT / f"{pair.lock}-{port}.lock", "w")  # held open (locked) for the whole run
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise SystemExit(
            f"another run is using the instances on port {port} ({', '.join(pair.prefixes.values())}<VAR> move a "
            "run to ports of its own)"
        ) from None
    return lock


def bring_up(pair: Pair = PAIR) -> tuple[dict[str, Stack], list[str]]:
    """Both instances up (started at once: ~20 s together); returns their handles and the modes this run
    started (the ones it stops)."""
    for m in MODES:
        # It stops, and empties, what it starts: never a stack it does not own (the shared one included).
        if not Path(instance_env(m, pair)["STACK_DIR"]).name.startswith(".data-bench"):
            raise SystemExit(f"{pair.prefixes[m]}STACK_DIR must name a .data-bench* directory of its own")
    started = [m for m in MODES if not healthy(instance(m, pair).addresses())]
    for m in started:
        # Ours only (its own STACK_DIR): whatever an earlier run left (a crashed start) is stopped, and the
        # instance starts from empty data, so no run reads back an earlier run's queue or topics.
        _stack_sh(m, "down", pair=pair)
        shutil.rmtree(instance_env(m, pair)["STACK_DIR"], ignore_errors=True)
    procs = {
        m: subprocess.Popen(
            ["bash", str(STACK), "up"],
            env=instance_env(m, pair),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for m in MODES
    }
    failed = []
    for m, p in procs.items():
        _, err = p.communicate(timeout=600)
        if p.returncode != 0:
            failed.append(f"{m}: stack.sh up failed:\n{err[-2000:]}")
    if failed:
        bring_down(started, pair)
        raise SystemExit("\n".join(failed))
    stacks = {m: stack_of(instance(m, pair).addresses()) for m in MODES}
    return stacks, started


def bring_down(modes: list[str], pair: Pair = PAIR) -> None:
    """Stops the instances this run started and drops their data, keeping their logs (``drop_data``)."""
    for m in modes:
        instance(m, pair).down_dropping_data(BROKER_EXTENSION=pair.placements[m]["BROKER_EXTENSION"])


def marked_total(s: Stack) -> float:
    """The extension's ``ledger_deletion_broker_marked_total`` on this broker (0 on stock brokers)."""
    try:
        with urllib.request.urlopen(f"{s.admin_url}/metrics/", timeout=30) as r:
            text = r.read().decode()
    except OSError:
        return float("nan")
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("ledger_deletion_broker_marked_total")
    )


# ---------------------------------------------------------------------------------------------- workloads


@dataclass
class Sample:
    """One workload on one instance in one round."""

    figures: dict[str, float] = field(default_factory=dict)
    latencies_ms: dict[str, list[float]] = field(default_factory=dict)
    marked: float = 0.0
    errors: list[str] = field(default_factory=list)


def produce_consume(s: Stack, topic: str, n: int, size: int, *, batched: bool, window: int, rate: int = 0) -> Sample:
    """A producer and a consumer on one fresh topic, at once. ``rate`` 0: as fast as the window allows."""
    out = Sample()
    payload = os.urandom(size)
    client = pulsar.Client(s.service_url, logger=quiet_logger(), operation_timeout_seconds=60)
    sent = [0.0] * n
    acked = [0.0] * n
    e2e_ms: list[float] = []
    received_at = [0.0]
    done = threading.Event()
    lock = threading.Lock()
    remaining = [n]
    try:
        consumer = client.subscribe(topic, "bench", consumer_type=pulsar.ConsumerType.Exclusive)
        producer = client.create_producer(
            topic,
            batching_enabled=batched,
            max_pending_messages=window,
            block_if_queue_full=True,
            send_timeout_millis=120_000,
        )

        def consume() -> None:
            got = 0
            while got < n:
                try:
                    msg = consumer.receive(timeout_millis=60_000)
                except pulsar.Timeout:
                    out.errors.append(f"consumer: nothing for 60 s after {got} of {n}")
                    return
                now = time.perf_counter()
                e2e_ms.append(time.time() * 1000 - msg.publish_timestamp())
                got += 1
                # Cumulative acks every 100 (and the last): the consumer keeps up, and the slowest cursor
                # moves past ledgers, which retention 0 then trims while the row runs.
                if got % 100 == 0 or got == n:
                    consumer.acknowledge_cumulative(msg)
                received_at[0] = now

        reader = threading.Thread(target=consume, name="bench-consumer", daemon=True)
        reader.start()

        def callback(i: int) -> Any:
            def cb(res: pulsar.Result, _mid: Any) -> None:
                acked[i] = time.perf_counter()
                if res != pulsar.Result.Ok:
                    out.errors.append(f"send {i}: {res}")
                with lock:
                    remaining[0] -= 1
                    if remaining[0] == 0:
                        done.set()

            return cb

        t0 = time.perf_counter()
        for i in range(n):
            if rate:
                delay = t0 + i / rate - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
            sent[i] = time.perf_counter()
            producer.send_async(payload, callback(i))
        producer.flush()
        if not done.wait(180):
            out.errors.append(f"only {n - remaining[0]} of {n} sends acknowledged after 180 s")
        reader.join(180)
        last_ack = max(acked)
        out.figures["produce_rate"] = n / (last_ack - sent[0])
        if received_at[0] and not out.errors:
            out.figures["e2e_rate"] = n / (received_at[0] - sent[0])
        out.latencies_ms["publish"] = [(a - b) * 1000 for a, b in zip(acked, sent, strict=True) if a]
        out.latencies_ms["e2e"] = e2e_ms
        producer.close()
        consumer.close()
    finally:
        client.close()
    return out


def _fill(s: Stack, topics: list[str], per_topic: int, size: int) -> None:
    client = pulsar.Client(s.service_url, logger=quiet_logger(), operation_timeout_seconds=60)
    try:
        # Blocking when the client's queue is full: past its 1,000 pending messages a send would fail unseen.
        producers = [client.create_producer(t, batching_enabled=False, block_if_queue_full=True) for t in topics]
        payload = os.urandom(size)
        for _ in range(per_topic):
            for p in producers:
                p.send_async(payload, None)
        for p in producers:
            p.flush()
            p.close()
    finally:
        client.close()


async def _ledger_ids(admin: PulsarAdmin, topic: str) -> set[int]:
    t = TopicName.parse(topic)
    try:
        st = await admin.internal_stats(t)
    except NotOwner as e:  # a cluster's other broker owns it (bench.perf_cost): asked there
        if not e.location:
            raise
        u = urllib.parse.urlsplit(e.location)
        st = await admin.internal_stats(t, base=f"{u.scheme}://{u.netloc}")
    return {int(x["ledgerId"]) for x in st.get("ledgers", [])}


async def trims(s: Stack, namespace: str, k: Knobs) -> tuple[Sample, set[int]]:
    """K topics of L closed ledgers, retention then 0, every topic trimmed at once. Returns the figures and
    the ledger ids the trims dropped."""
    out = Sample()
    topics = [f"persistent://{namespace}/t{i}" for i in range(k.trim_topics)]
    async with admin_for(s) as admin:
        await admin.ensure_namespace(namespace)
        await admin.set_retention(namespace, -1, -1)  # nothing trimmed while the ledgers are made
        if k.ledgers == "small":
            await asyncio.to_thread(_fill, s, topics, k.trim_ledgers * ENTRIES_PER_LEDGER, 1024)
        else:
            # Ledgers of Pulsar's size would take minutes to fill: each is closed by unloading its topic
            # (the broker closes the current ledger; the next producer opens a new one).
            for _ in range(k.trim_ledgers):
                await asyncio.to_thread(_fill, s, topics, ENTRIES_PER_LEDGER, 1024)
                await asyncio.gather(*(admin.unload(TopicName.parse(t)) for t in topics))
        before = await asyncio.gather(*(_ledger_ids(admin, t) for t in topics))
        await admin.set_retention(namespace, 0, 0)
        await asyncio.sleep(k.policy_wait_s)  # the policy reaches the topics (a metadata notification)

        async def one(t: str) -> float:
            t1 = time.perf_counter()
            await admin.trim(TopicName.parse(t))
            return (time.perf_counter() - t1) * 1000

        t0 = time.perf_counter()
        lat = await asyncio.gather(*(one(t) for t in topics), return_exceptions=True)
        elapsed = time.perf_counter() - t0
        after = await asyncio.gather(*(_ledger_ids(admin, t) for t in topics))
    dropped: set[int] = set()
    for b, a in zip(before, after, strict=True):
        dropped |= b - a
    expected = k.trim_topics * k.trim_ledgers
    for x in lat:
        if isinstance(x, BaseException):
            out.errors.append(f"trim: {type(x).__name__}: {x}")
    if len(dropped) < expected:
        out.errors.append(
            f"trims dropped {len(dropped)} of the {expected} closed ledgers (retention not applied in "
            f"{k.policy_wait_s} s? BENCH_EXT_POLICY_WAIT_S)"
        )
    out.figures["trims_per_s"] = k.trim_topics / elapsed
    out.figures["ledgers_per_s"] = len(dropped) / elapsed
    out.figures["dropped"] = float(len(dropped))
    out.latencies_ms["trim"] = [x for x in lat if isinstance(x, float)]
    return out, dropped


def queued_ledgers(s: Stack, namespaces: set[str]) -> set[int]:
    """Ledger ids of ``namespaces`` on the instance's pending topic (read from the start with readers: a
    reader is not held back by ``deliverAfter``)."""
    from worker.formats.message import InvalidMessage, decode

    client = pulsar.Client(s.service_url, logger=quiet_logger())
    out: set[int] = set()
    try:
        for p in range(PENDING_PARTITIONS):
            reader = client.create_reader(f"{PENDING}-partition-{p}", pulsar.MessageId.earliest)
            while reader.has_message_available():
                try:
                    info = decode(reader.read_next(timeout_millis=10_000).data())
                except InvalidMessage:
                    continue
                if info.topic_name.split("://", 1)[-1].rsplit("/", 1)[0] in namespaces:
                    out.add(info.ledger_id)
            reader.close()
    finally:
        client.close()
    return out


# ---------------------------------------------------------------------------------------------- the run

# (figure key, label, unit): "workload.figure" (a rate, median of the rounds) or "workload.latency.pNN"
FIGURES: list[tuple[str, str, str]] = [
    ("non-batched.produce_rate", "non-batched: produce", "msg/s"),
    ("non-batched.publish.p50", "non-batched: publish latency p50", "ms"),
    ("non-batched.publish.p99", "non-batched: publish latency p99", "ms"),
    ("non-batched.e2e_rate", "non-batched: end-to-end consume", "msg/s"),
    ("batched.produce_rate", "batched: produce", "msg/s"),
    ("batched.publish.p50", "batched: publish latency p50", "ms"),
    ("batched.publish.p99", "batched: publish latency p99", "ms"),
    ("batched.e2e_rate", "batched: end-to-end consume", "msg/s"),
    ("paced.publish.p50", "paced: publish latency p50", "ms"),
    ("paced.publish.p99", "paced: publish latency p99", "ms"),
    ("paced.e2e.p50", "paced: end-to-end latency p50", "ms"),
    ("paced.e2e.p99", "paced: end-to-end latency p99", "ms"),
    ("trim.trims_per_s", "trim: topics trimmed", "trims/s"),
    ("trim.ledgers_per_s", "trim: ledgers dropped", "ledgers/s"),
    ("trim.trim.p50", "trim: trim call p50", "ms"),
    ("trim.trim.p99", "trim: trim call p99", "ms"),
]
WORKLOADS = ("non-batched", "batched", "paced", "trim")


def combine(samples: dict[str, list[Sample]]) -> dict[str, dict[str, Any]]:
    """Per figure and mode: the value (median of the rounds for rates; percentile of the pooled samples
    for latencies) and each round's own value (the spread)."""
    res: dict[str, dict[str, Any]] = {}
    for key, _label, unit in FIGURES:
        wl, rest = key.split(".", 1)
        res[key] = {}
        for mode in MODES:
            rounds = samples.get(f"{wl}/{mode}", [])
            if rest.count(".") == 1:  # a latency percentile: "publish.p99"
                name, q = rest.split(".")
                pooled = [v for r in rounds for v in r.latencies_ms.get(name, [])]
                per_round = [sample_quantiles(r.latencies_ms.get(name, []), (int(q[1:]) / 100,))[q] for r in rounds]
                value = sample_quantiles(pooled, (int(q[1:]) / 100,))[q] if pooled else None
            else:
                per_round = [r.figures.get(rest) for r in rounds]
                got = [v for v in per_round if v is not None]
                value = statistics.median(got) if got else None
            res[key][mode] = {"value": value, "rounds": per_round}
        res[key]["paired"] = paired(unit, res[key])
    return res


# A figure is called worse (or better) only when the extension lost (or won) in nearly every round against
# the stock run next to it: a two-sided sign test over the rounds, p below this.
SIGN_TEST_P = 0.1


def sign_test_p(k: int, n: int) -> float:
    """Two-sided exact sign test: the chance of a split at least as lopsided as k of n with a fair coin."""
    if n == 0:
        return 1.0
    tail: float = sum(math.comb(n, i) for i in range(max(k, n - k), n + 1)) / 2**n
    return min(1.0, 2 * tail)


def paired(unit: str, fig: dict[str, Any]) -> dict[str, Any]:
    """Each round's extension figure against the stock figure of the same round (run next to it): the median
    of those ratios, in how many rounds the extension was worse, and the verdict."""
    pairs = [
        b / a for a, b in zip(fig["stock"]["rounds"], fig["extension"]["rounds"], strict=False) if a and b is not None
    ]
    worse = sum(1 for r in pairs if _worse(unit, r))
    better = sum(1 for r in pairs if r != 1.0 and not _worse(unit, r))
    n = worse + better
    p = sign_test_p(worse, n)
    if p < SIGN_TEST_P:
        verdict = "worse" if worse > better else "better"
    else:
        verdict = "not measurable"
    return {
        "median_paired_ratio": statistics.median(pairs) if pairs else None,
        "worse_rounds": worse,
        "rounds": len(pairs),
        "sign_test_p": round(p, 3),
        "verdict": verdict,
    }


def render(res: dict[str, dict[str, Any]], marked: dict[str, float]) -> str:
    head = (
        f"{'figure':<36} {'unit':<9} {'stock':>9} {'extension':>10} {'ext/stock':>9} {'per round':>9} "
        f"{'ext worse':>9}  verdict"
    )
    lines = [head, "-" * len(head)]
    for key, label, unit in FIGURES:
        st, ex, pr = res[key]["stock"], res[key]["extension"], res[key]["paired"]
        a, b = st["value"], ex["value"]
        ratio = b / a if a and b is not None else None
        fmt = ".1f" if unit == "ms" else ",.0f"
        lines.append(
            f"{label:<36} {unit:<9} {_v(a, fmt):>9} {_v(b, fmt):>10} {_v(ratio, '.2f') + 'x':>9} "
            f"{_v(pr['median_paired_ratio'], '.2f') + 'x':>9} {str(pr['worse_rounds']) + '/' + str(pr['rounds']):>9}  "
            f"{pr['verdict']}"
        )
    lines.append("")
    lines.append(
        "ledgers the extension queued while each workload ran, all rounds (its broker's counter, so background "
        "retention trims of earlier topics count too): "
        + ", ".join(f"{wl} {marked.get(wl, 0):.0f}" for wl in WORKLOADS)
    )
    return "\n".join(lines)


def _worse(unit: str, ratio: float) -> bool:
    return ratio > 1 if unit == "ms" else ratio < 1


def _v(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


async def run_workload(wl: str, mode: str, s: Stack, run_id: str, r: int, k: Knobs) -> tuple[Sample, set[int]]:
    topic = f"persistent://public/default/ldw-bx-{run_id}-{wl}-r{r}"
    if wl == "non-batched":
        return await asyncio.to_thread(produce_consume, s, topic, k.msgs, k.size, batched=False, window=k.window), set()
    if wl == "batched":
        return (
            await asyncio.to_thread(produce_consume, s, topic, k.batched_msgs, k.size, batched=True, window=k.window),
            set(),
        )
    if wl == "paced":
        return (
            await asyncio.to_thread(
                produce_consume, s, topic, k.paced_msgs, k.size, batched=False, window=k.window, rate=k.rate
            ),
            set(),
        )
    return await trims(s, f"public/ldw-bx-{run_id}-trim-r{r}", k)


async def amain() -> int:
    k = Knobs.from_env()
    run_id = uuid.uuid4().hex[:8]
    t_start = time.monotonic()
    meta: dict[str, Any] = {
        "run_id": run_id,
        "bench": "extension",
        "started": datetime.now(UTC).isoformat(timespec="seconds"),
        "git_head": _git_head(),
        "machine": _machine(),
        "knobs": k.__dict__,
        "loadavg_before": _loadavg(),
    }
    run_lock = exclusive()
    print("[bench] bringing up a stock instance and an extension instance ...", flush=True)
    t = time.monotonic()
    stacks, started = bring_up()
    meta["up_s"] = round(time.monotonic() - t, 1)
    meta["instances"] = {m: {"admin": stacks[m].admin_url, "service": stacks[m].service_url} for m in MODES}
    samples: dict[str, list[Sample]] = {}
    marked: dict[str, float] = {}
    dropped: dict[str, set[int]] = {m: set() for m in MODES}
    trim_namespaces: set[str] = set()
    try:
        print("[bench] warm-up (not measured) ...", flush=True)
        for m in MODES:
            await asyncio.to_thread(
                produce_consume,
                stacks[m],
                f"persistent://public/default/ldw-bx-{run_id}-warmup",
                500,
                k.size,
                batched=False,
                window=k.window,
            )
        for r in range(k.rounds):
            order = MODES if r % 2 == 0 else tuple(reversed(MODES))
            for wl in WORKLOADS:
                for m in order:
                    before = marked_total(stacks[m]) if m == "extension" else 0.0
                    sample, gone = await run_workload(wl, m, stacks[m], run_id, r, k)
                    if m == "extension":
                        sample.marked = marked_total(stacks[m]) - before
                        marked[wl] = marked.get(wl, 0.0) + sample.marked
                    dropped[m] |= gone
                    if wl == "trim":
                        trim_namespaces.add(f"public/ldw-bx-{run_id}-trim-r{r}")
                    samples.setdefault(f"{wl}/{m}", []).append(sample)
                    figs = ", ".join(f"{x} {v:,.1f}" for x, v in sample.figures.items())
                    lat = ", ".join(
                        f"{x} p99 {sample_quantiles(v, (0.99,))['p99'] or 0:.1f} ms"
                        for x, v in sample.latencies_ms.items()
                        if v
                    )
                    print(f"[bench] round {r + 1}/{k.rounds} {wl:<11} {m:<9} {figs}; {lat}", flush=True)
                    for e in sample.errors:
                        print(f"[bench]   ERROR {e}", flush=True)
        # (Not read on the stock instance: a reader there would auto-create the topic it looks for.)
        queued = await asyncio.to_thread(queued_ledgers, stacks["extension"], trim_namespaces)
    finally:
        if os.environ.get("BENCH_EXT_KEEP") != "1":
            bring_down(started)
    res = combine(samples)
    on_queue = len(dropped["extension"] & queued)
    meta["loadavg_after"] = _loadavg()
    meta["total_s"] = round(time.monotonic() - t_start, 1)
    print()
    print(render(res, marked))
    print(
        f"trims: the extension instance's queue holds {on_queue} of the {len(dropped['extension'])} ledgers its trims "
        f"dropped (stock brokers queue nothing: their trims dropped {len(dropped['stock'])})"
    )
    print(
        f"compared against: the same workloads on stock brokers (BROKER_EXTENSION=0, {stacks['stock'].admin_url}), "
        f"same config and heap, alternated with the extension's ({stacks['extension'].admin_url}) in "
        f"{k.rounds} rounds (A/B, B/A, ...); rates = median of the rounds, latencies = percentiles of all rounds' "
        f"samples; per round = median of each round's extension/stock ratio; 'ext worse' = rounds in which the "
        f"extension did worse than the stock run next to it; worse/better only when a sign test over the rounds "
        f"gives p < {SIGN_TEST_P}, else not measurable; messages of {k.size} B, window {k.window}, paced at "
        f"{k.rate} msg/s; ledgers: {k.ledgers} ("
        + ("5 entries each, retention 0" if k.ledgers == "small" else "Pulsar's rollover defaults, retention 0")
        + ")"
    )
    print(f"load average before/after: {meta['loadavg_before']} / {meta['loadavg_after']}; total {meta['total_s']}s")
    errors = [e for ss in samples.values() for x in ss for e in x.errors]
    out = {
        "meta": meta,
        "figures": res,
        "marked_per_workload": marked,
        "trim_dropped": {m: len(v) for m, v in dropped.items()},
        "trim_on_extension_queue": on_queue,
        "errors": errors,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    kept = RESULTS / f"{meta['started'][:19].replace(':', '')}-extension-{run_id}.json"
    kept.write_text(json.dumps(out, indent=2, default=str) + "\n")
    print(f"results: {kept.relative_to(REPO) if kept.is_relative_to(REPO) else kept}")
    run_lock.close()
    return 1 if errors or on_queue < len(dropped["extension"]) else 0


def main() -> int:
    return asyncio.run(amain())


if __name__ == "__main__":
    raise SystemExit(main())
