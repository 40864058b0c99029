"""Run the real worker daemon as a subprocess against the local stack, and talk to it like an operator.

Each harness gets its own pending/retry/DLQ topics, so tests (and concurrent daemons) never see each
other's messages.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pulsar
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testkit.java_programs import java_command
from testkit.stack import REPO, Stack
from worker.broker.client import PendingDeleteSchema
from worker.formats.message import LedgerComponent, LedgerType, PendingDeleteLedgerInfo


def quiet_logger() -> Any:
    """The C++ client logs every connect at INFO; tests only want its warnings."""
    return pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _secret_file(workdir: Path, name: str, value: str) -> Path:
    p = workdir / name
    p.write_text(value)
    p.chmod(0o600)
    return p


class WorkerHarness:
    def __init__(self, stack: Stack, workdir: Path, name: str, **overrides: Any) -> None:
        self.stack = stack
        self.workdir = workdir
        self.name = name
        base = f"persistent://pulsar/system/__ledger_deletion-{name}"
        self.port = free_port()
        cfg: dict[str, Any] = {
            "pulsar": {"service_url": stack.service_url, "admin_url": stack.admin_url},
            "topics": {"pending": base, "retry": f"{base}-RETRY", "dlq": f"{base}-DLQ", "parallelism": 2},
            "bookkeeper": {"http_url": stack.bookie_http_url},
            "zookeeper": {"metadata_store_url": f"zk:{stack.zookeeper_hosts}"},
            "offload": {
                "s3_targets": [
                    {
                        "bucket": stack.s3_bucket,
                        "endpoint": stack.s3_endpoint,
                        "region": "us-east-1",
                        # From files, as in production: the nightly jobs never ship a key inline.
                        "access_key_id_file": str(_secret_file(workdir, "s3-access-key-id", "testing")),
                        "secret_access_key_file": str(_secret_file(workdir, "s3-secret-access-key", "testing")),
                    }
                ]
            },
            "worker": {
                # Real enough to be exercised (ledgers made by a test are retried as too young first),
                # short enough for a test; above snapshot_ttl_s, as the settings demand.
                "min_ledger_age_s": 2,
                "backoff_initial_s": 0.5,
                "backoff_max_s": 2,
                "in_use_retry_s": 1,
                "snapshot_ttl_s": 0.5,
                "drain_timeout_s": 10,
                "stats_poll_interval_s": 1,
                "max_attempts": 10,
            },
            "http": {"host": "127.0.0.1", "port": self.port},
            "logging": {"level": "DEBUG", "format": "json"},
        }
        if stack.mark_key_file:
            # The stack's brokers sign what their extension queues: the worker checks it with the same key.
            cfg["worker"]["broker_mark_key_file"] = stack.mark_key_file
        for section, values in overrides.items():
            cfg.setdefault(section, {}).update(values)
        self.config = cfg
        self.config_path = workdir / f"worker-{name}.yaml"
        self.config_path.write_text(yaml.safe_dump(cfg))
        self.log_path = workdir / f"worker-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._client: pulsar.Client | None = None
        self._producer: Any = None

    @property
    def topics(self) -> dict[str, str]:
        return dict(self.config["topics"])

    # ---- process ----------------------------------------------------------------------------------
    def start(self, timeout: float = 60) -> WorkerHarness:
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "worker.cli", "run", "--config", str(self.config_path)],
            cwd=REPO,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"worker exited with {self.proc.returncode}:\n{self.log_tail()}")
            if self._get("/readyz") == 200:
                return self
            time.sleep(0.3)
        raise AssertionError(f"worker not ready after {timeout}s:\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=timeout)
        return int(self.proc.returncode)

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def log_tail(self, n: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def log_events(self) -> list[dict[str, Any]]:
        """The daemon's JSON log lines, parsed (other lines skipped)."""
        import json

        out = []
        for line in self.log_text().splitlines():
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if isinstance(d, dict):
                out.append(d)
        return out

    def _get(self, path: str) -> int:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=2) as r:
                return int(r.status)
        except urllib.error.HTTPError as e:
            return int(e.code)
        except OSError:
            return 0

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
            text = r.read().decode()
        out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def metric(self, name: str, **labels: str) -> float:
        """Sum of a metric's samples whose labels include ``labels``."""
        total = 0.0
        for (n, lbls), v in self.metrics().items():
            if n == name and all(dict(lbls).get(k) == val for k, val in labels.items()):
                total += v
        return total

    # ---- producing --------------------------------------------------------------------------------
    def send(
        self, info: PendingDeleteLedgerInfo, *, raw: bytes | None = None, properties: dict[str, str] | None = None
    ) -> None:
        """Queue a pending deletion (no delay: tests decide when the worker should see it)."""
        if self._client is None:
            self._client = pulsar.Client(self.stack.service_url, logger=quiet_logger())
        if raw is not None:
            p = self._client.create_producer(self.topics["pending"], batching_enabled=False)
            p.send(raw)
            p.close()
            return
        if self._producer is None:
            self._producer = self._client.create_producer(
                self.topics["pending"], schema=PendingDeleteSchema(), batching_enabled=False
            )
        self._producer.send(info, properties=properties or {})

    def read_dlq(self, timeout_ms: int = 2000) -> list[pulsar.Message]:
        """Everything in the DLQ, read with a non-durable reader (does not consume)."""
        client = self._client or pulsar.Client(self.stack.service_url, logger=quiet_logger())
        self._client = client
        reader = client.create_reader(self.topics["dlq"], pulsar.MessageId.earliest)
        out = []
        try:
            while reader.has_message_available():
                out.append(reader.read_next(timeout_millis=timeout_ms))
        finally:
            reader.close()
        return out

    def close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
            self._producer = None

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.stop()
        self.close_client()


def _create_ledger_cmd(stack: Stack, count: int, entries: int, custom: dict[str, str]) -> list[str]:
    return java_command(
        "CreateLedger", stack.zookeeper_hosts, str(count), str(entries), *(f"{k}={v}" for k, v in custom.items())
    )


def recover_with_bookkeeper(
    stack: Stack, ledger_ids: list[int], *, digest: str = "CRC32C", password: str = ""
) -> dict[int, tuple[int, int]]:
    """BookKeeper's own recovery open of each ledger (RecoverLedger.java): ledger id -> (last entry id, length)."""
    env = {**os.environ, "DIGEST": digest, "PASSWORD": password}
    cmd = java_command("RecoverLedger", stack.zookeeper_hosts, *map(str, ledger_ids))
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    got = {}
    for line in out.stdout.splitlines():
        if line.startswith("RECOVERED="):
            lid, last, length = map(int, line.split("=", 1)[1].split(","))
            got[lid] = (last, length)
    assert set(got) == set(ledger_ids), (
        f"RecoverLedger failed ({out.returncode}): {out.stdout[-2000:]} {out.stderr[-2000:]}"
    )
    return got


def create_ledgers(
    stack: Stack,
    count: int,
    custom: dict[str, str],
    entries: int = 3,
    *,
    leave_open: bool = False,
    digest: str = "CRC32C",
    password: str = "",
) -> list[int]:
    """Real BookKeeper ledgers with the given custom metadata, made with BookKeeper's own Java client
    (one JVM for all of them: a JVM start costs seconds). ``leave_open``: never closed (state OPEN).
    ``digest`` (CRC32C, CRC32, MAC, DUMMY) and ``password``: BookKeeper's, as a ledger's writer chooses them."""
    env = {**os.environ, "LEAVE_OPEN": "1" if leave_open else "0", "DIGEST": digest, "PASSWORD": password}
    ids: list[int] = []
    # One more run for what a failed run did not make: on 2 loaded cores a bookie client has failed once in
    # hundreds of runs. Ledgers it did make are printed before the failure, so none is made twice.
    for _ in range(2):
        cmd = _create_ledger_cmd(stack, count - len(ids), entries, custom)
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
        ids += [int(line.split("=", 1)[1]) for line in out.stdout.splitlines() if line.startswith("LEDGER_ID=")]
        if len(ids) == count:
            return ids
    raise AssertionError(f"CreateLedger failed ({out.returncode}): {out.stdout[-2000:]} {out.stderr[-2000:]}")


class LedgerWriter:
    """A live BookKeeper writer (BookKeeper's own Java client, CreateLedger.java with KEEP_WRITING): it keeps
    adding to its open ledger every 50 ms until an add fails, as a broker writing its current ledger does."""

    def __init__(self, stack: Stack, custom: dict[str, str], *, entries: int = 3, seconds: int = 120) -> None:
        env = {**os.environ, "KEEP_WRITING": str(seconds)}
        cmd = _create_ledger_cmd(stack, 1, entries, custom)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
        self.lines: list[str] = []
        self.ledger_id = int(self._until("LEDGER_ID="))

    def _until(self, prefix: str, *stops: str) -> str:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith((prefix, *stops)):
                return line.strip().split("=", 1)[-1]
        raise AssertionError(f"the writer ended before {prefix}: {self.lines[-20:]}")

    def added(self) -> list[int]:
        return [int(line.split("=", 1)[1]) for line in self.lines if line.startswith("ADDED=")]

    def wait_until_added(self, n: int) -> None:
        """Until the writer confirmed ``n`` more adds."""
        while len(self.added()) < n:
            self._until("ADDED=")

    def failure(self) -> str:
        """The exception that ended the writer's adds (waits for it; WRITER_DONE: none did)."""
        self._until("ADD_FAILED=", "WRITER_DONE")
        return self.lines[-1]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def ml_info(topic: str, ledger_id: int) -> PendingDeleteLedgerInfo:
    """A pending deletion of a managed-ledger ledger of ``topic`` (its BookKeeper copy)."""
    return PendingDeleteLedgerInfo(topic, LedgerComponent.MANAGED_LEDGER, LedgerType.LEDGER, ledger_id)


def pulsar_ml_metadata(topic: str) -> dict[str, str]:
    """Custom metadata exactly as Pulsar writes it on a managed-ledger ledger of ``topic``."""
    from worker.formats.topic_name import TopicName

    return {
        "application": "pulsar",
        "component": "managed-ledger",
        "pulsar/managed-ledger": TopicName.parse(topic).managed_ledger_name,
    }
