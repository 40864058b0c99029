"""The tables as an operator reads them: each command run by a shell in a real terminal (tmux, 80 and 200
columns), the screen read back with capture-pane. On the real stack: orphans of a topic with a 300-character
name and of a short one, dead letters, the queue backlogs, idle topics past their retention (trim-idle)."""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from testkit.footprint import stats_period_s
from testkit.harness import create_ledgers, pulsar_ml_metadata
from testkit.topics import produce
from tests.conftest import REPO, Stack
from tests.integration.conftest import WorkerFactory
from tests.integration.helpers import dead_letter, fresh_namespace, ml_info, quiet_logger, settings_of, worker_config
from worker.broker.admin import PulsarAdmin
from worker.broker.topology import ensure_topology
from worker.formats import message as m
from worker.formats.topic_name import TopicName

pytestmark = pytest.mark.integration
ELLIPSIS = "…"
DONE = "__LDW_DONE__"


class Terminal:
    """A tmux server of the test's own (its own socket), one window of a given size, a plain bash in it."""

    def __init__(self, width: int, height: int = 60) -> None:
        tmux = shutil.which("tmux")
        if tmux is None:
            pytest.fail("tmux missing: `make system-packages` installs it")
        self.width = width
        self.cmd = [tmux, "-L", f"ldw-test-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
        subprocess.run(
            [*self.cmd, "new-session", "-d", "-x", str(width), "-y", str(height), "bash --noprofile --norc"],
            check=True,
            env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "TERM": "xterm-256color", "HOME": "/tmp"},
        )
        subprocess.run([*self.cmd, "set-option", "-g", "history-limit", "5000"], check=True)

    def run(self, command: str, timeout: float = 300) -> list[str]:
        """Types ``command`` and Enter, waits for it to end; the screen lines it printed, wrapped lines joined
        back (-J) so that a line too long for the terminal shows as one long line."""
        subprocess.run([*self.cmd, "send-keys", "clear; tmux clear-history 2>/dev/null", "Enter"], check=True)
        time.sleep(0.3)
        subprocess.run([*self.cmd, "send-keys", f"{command}; echo {DONE}$?", "Enter"], check=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = subprocess.run(
                [*self.cmd, "capture-pane", "-p", "-J", "-S", "-"], capture_output=True, text=True, check=True
            ).stdout
            done = [line for line in screen.splitlines() if line.startswith(DONE)]
            if done:
                lines = screen.splitlines()
                start = next(i for i, line in enumerate(lines) if DONE in line and "echo" in line) + 1
                end = next(i for i, line in enumerate(lines) if line.startswith(DONE))
                assert done[0] == f"{DONE}0", "\n".join(lines)
                return [line.rstrip() for line in lines[start:end]]
            time.sleep(0.5)
        raise AssertionError(f"{command!r} did not finish in {timeout} s")

    def close(self) -> None:
        subprocess.run([*self.cmd, "kill-server"], check=False, capture_output=True)


WIDTHS = (80, 200)


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    """A terminal of 80 columns and one of 200; the same data is read in both."""
    ts = [Terminal(w) for w in WIDTHS]
    yield ts
    for t in ts:
        t.close()


def cli_line(config: Path, *args: str) -> str:
    # The command as an operator types it (the checkout on the path, as `make venv` installs it).
    return f"cd {shlex.quote(str(REPO))} && python -m worker.cli {shlex.join(args)} --config {shlex.quote(str(config))}"


def check_fits(lines: list[str], width: int) -> None:
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, f"lines wider than {width} columns:\n" + "\n".join(too_long)


def table_rows(lines: list[str], header_start: str) -> tuple[str, list[str]]:
    """The header line and the rows under it (up to the first empty line)."""
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        rows.append(line)
    return lines[start], rows


async def test_scan_dry_run_reads_well(
    stack: Stack, unique: str, admin: PulsarAdmin, tmp_path: Path, terminals: list[Terminal], make_worker: WorkerFactory
) -> None:
    ns = await fresh_namespace(admin, f"ldw-tty-{unique}")
    long_topic = f"persistent://{ns}/" + "a-topic-name-nobody-should-ever-type-" * 8 + "the-end"
    short_topic = f"persistent://{ns}/orders"
    long_ids = create_ledgers(stack, 2, pulsar_ml_metadata(long_topic))
    [short_id] = create_ledgers(stack, 1, pulsar_ml_metadata(short_topic))
    h = worker_config(make_worker, f"tty-{unique}")
    report = tmp_path / "scan.json"
    for terminal in terminals:
        lines = terminal.run(
            cli_line(h.config_path, "scan", "--dry-run", "-n", ns, "--min-age", "0s", "--report", str(report))
        )
        print("\n".join(lines))
        check_fits(lines, terminal.width)
        header, rows = table_rows(lines, "LEDGER")
        assert header.split() == ["LEDGER", "TOPIC", "COMPONENT", "AGE", "SIZE", "WHY", "ORPHAN"]
        assert sorted(int(r.split()[0]) for r in rows) == sorted([*long_ids, short_id])
        by_id = {int(r.split()[0]): r for r in rows}
        # The short name whole (without the persistent:// every topic has); the long one keeps both ends.
        assert f" {short_topic.removeprefix('persistent://')} " in by_id[short_id]
        for lid in long_ids:
            cell = by_id[lid].split()[1]
            # its head (tenant, namespace) and its tail (the local name), as much of each as the width allows
            assert ELLIPSIS in cell and cell.startswith("public/ldw-tty-") and cell.endswith("type-the-end"), by_id[lid]
        for r in rows:  # every column on every row, each under its header
            assert "MANAGED_LEDGER" in r and "topic gone" in r
            assert r.index("topic gone") == header.index("WHY ORPHAN")
        assert any(line.startswith("3 orphans among") for line in lines)
        text = " ".join(lines)  # what a person reads, prose wrapped at words to the terminal's width
        assert f"shortened to fit {terminal.width} columns; --report {report} has everything" in text
        assert not any(line.lstrip().startswith("{") for line in lines), "no JSON on the terminal"
        # The whole names are in the report.
        assert long_topic in report.read_text()


async def test_inflight_and_dlq_list_read_well(
    stack: Stack, unique: str, admin: PulsarAdmin, terminals: list[Terminal], make_worker: WorkerFactory
) -> None:
    h = worker_config(make_worker, f"tty-dlq-{unique}")
    s = settings_of(h)
    await ensure_topology(admin, s.topics)
    topic = f"persistent://public/default/dl-{unique}-" + "x" * 150
    error = "bookie http://pulsar-bookie-0.pulsar-bookie.pulsar.svc:8000: 503 Service Unavailable; " * 4
    client = pulsar.Client(stack.service_url, logger=quiet_logger())
    try:
        for lid in (41, 42):
            props = {m.REASON: "transient", m.LAST_ERROR: error, m.RECONSUMETIMES: "10"}
            dead_letter(client, s.topics.dlq, m.encode(ml_info(topic, lid)), props)
    finally:
        client.close()

    for terminal in terminals:
        lines = terminal.run(cli_line(h.config_path, "dlq", "list"))
        print("\n".join(lines))
        check_fits(lines, terminal.width)
        header, rows = table_rows(lines, "LEDGER")
        assert header.split()[:4] == ["LEDGER", "COPY", "TOPIC", "REASON"]
        assert [r.split()[0] for r in rows] == ["41", "42"]
        for r in rows:
            assert re.search(r"\btransient\s+10\s+parked\b", r), r
            # tenant and namespace at the head (the width decides whether the slash after them fits)
            assert re.search(r"\bpublic/default(/\S*)?…x+ ", r), r
            if terminal.width >= 200:
                assert f"dl-{unique}" in r
                assert r[header.index("LAST ERROR") :].startswith("bookie http://")
        if terminal.width < 200:  # no room for it beside a readable topic: left out, and said so
            assert "LAST ERROR" not in header
            assert "LAST ERROR left out to fit 80 columns" in " ".join(lines)
        assert any(line.startswith("2 dead letters on") for line in lines)

        lines = terminal.run(cli_line(h.config_path, "inflight"))
        print("\n".join(lines))
        check_fits(lines, terminal.width)
        header, rows = table_rows(lines, "ROLE")
        assert header.split() == ["ROLE", "TOPIC", "SUBSCRIPTION", "BACKLOG"]
        assert [r.split()[0] for r in rows] == ["pending", "retry", "dlq", "total"]
        assert rows[-1].split()[-1] == "2" and rows[-1].index("2") == header.index("BACKLOG") + len("BACKLOG") - 1


async def test_trim_idle_reads_well(
    stack: Stack, unique: str, admin: PulsarAdmin, terminals: list[Terminal], make_worker: WorkerFactory
) -> None:
    ns = await fresh_namespace(admin, f"ldw-ttytrim-{unique}")
    long_topic = f"persistent://{ns}/" + "an-idle-topic-name-nobody-should-ever-type-" * 6 + "the-end"
    short_topic = f"persistent://{ns}/orders"
    for topic in (long_topic, short_topic):
        produce(stack.service_url, topic, 30, payload=b"x" * 1024)  # 6 ledgers of 5 entries
        await admin.unload(TopicName.parse(topic))
    await admin.set_retention(ns, 0, 0)
    # The brokers' lists of loaded topics must have been refreshed since the unloads.
    await asyncio.sleep(await stats_period_s(admin) + 5)
    h = worker_config(make_worker, f"ttytrim-{unique}")
    for terminal in terminals:
        lines = terminal.run(cli_line(h.config_path, "trim-idle", "-n", ns))
        print("\n".join(lines))
        check_fits(lines, terminal.width)
        header, rows = table_rows(lines, "TOPIC")
        assert header.split()[:4] == ["TOPIC", "LEDGERS", "PAST", "RETENTION"], header
        assert len(rows) == 2, rows
        names = sorted((r.split()[0] for r in rows), key=lambda cell: not cell.endswith("/orders"))
        short, long = names
        # At 200 columns the short name is whole; at 80 either may lose its middle, never its head or its tail.
        if terminal.width == 200:
            assert short == short_topic.removeprefix("persistent://"), rows
        assert short.startswith("public/ldw-tty") and short.endswith("/orders"), rows
        assert long.startswith("public/ldw-tty") and long.endswith("type-the-end") and ELLIPSIS in long, rows
        # Each row says how many of the topic's ledgers are past its retention: all but the last one here.
        assert all(re.search(r"\s(\d+)/(\d+)\s", r) for r in rows), rows
        assert any("dry run: nothing trimmed" in line for line in lines), lines
