"""A standalone stack instance of its own whose broker runs the broker extension (broker-extension/).

Every test here is marked ``extension`` (and ``integration``). The session fixture starts the instance
(``deploy/local/stack.sh up`` with BROKER_EXTENSION=1, a 1 s send delay, the bucket delayed-delivery
tracker (``EXT_BROKER_CONF``) and its own ports and data, beside the shared stack: about 20 s and one
JVM) if it is not up, and stops it after the last test unless it was already up or
``LDW_EXTENSION_KEEP=1``. ``LDW_EXTENSION=0`` skips these tests, saying so. Its ports, data directory and Pulsar
version come from ``LDW_EXT_<VAR>`` (e.g. ``LDW_EXT_WEB_PORT``), defaults in ``EXT_ENV``: the same jar runs on
every line ``stack.sh`` can start (``LDW_EXT_PULSAR_VERSION``, else ``PULSAR_VERSION``; its data apart).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.harness import WorkerHarness
from testkit.stack import REPO, STACK, admin_for, bookie_for, mark_directory, parse_env, stack_of
from tests.conftest import Stack
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin

# The extension's own queue (its default): what the broker publishes to.
PENDING = "persistent://pulsar/system/__ledger_deletion"

# The Pulsar line: the session's own (PULSAR_VERSION) unless LDW_EXT_PULSAR_VERSION says otherwise; another line
# than 4.0.8 keeps its data apart.
_VERSION = os.environ.get("LDW_EXT_PULSAR_VERSION", os.environ.get("PULSAR_VERSION", "4.0.8"))
EXT_ENV = {
    "PROFILE": "standalone",
    "PULSAR_VERSION": _VERSION,
    "STACK_DIR": str(REPO / "deploy" / "local" / (".data-extension" + ("" if _VERSION == "4.0.8" else f"-{_VERSION}"))),
    "WEB_PORT": "18080",
    "BROKER_PORT": "16650",
    "BOOKIE_PORT": "13181",
    "BOOKIE_HTTP_PORT": "18000",
    "ZK_PORT": "12181",
    "S3_PORT": "15000",
    "BROKER_EXTENSION": "1",
    "BROKER_EXTENSION_SEND_DELAY_S": "1",
    # One JVM beside the shared stacks on 2 cores: a smaller heap than the shared standalone's.
    "PULSAR_MEM": "-Xms256m -Xmx768m -XX:MaxDirectMemorySize=512m",
}


# broker.conf lines of this instance only (stack.sh's BROKER_EXTENSION_CONF; a test's own, set in the
# environment, come after them and win): the bucket delayed-delivery tracker, sealing a bucket (a snapshot
# ledger, test_delayed_buckets.py) once it holds 5 messages and a newer ledger arrives (a ledger holds 5
# entries here, config/standalone.conf).
EXT_BROKER_CONF = (
    "delayedDeliveryTrackerFactoryClassName=org.apache.pulsar.broker.delayed.BucketDelayedDeliveryTrackerFactory"
    " delayedDeliveryMinIndexCountPerBucket=5"
)


def ext_env(**overrides: str) -> dict[str, str]:
    env = {**os.environ}
    for k, v in EXT_ENV.items():
        env[k] = os.environ.get(f"LDW_EXT_{k}", v)
    env["BROKER_EXTENSION_CONF"] = f"{EXT_BROKER_CONF} {os.environ.get('BROKER_EXTENSION_CONF', '')}".strip()
    return {**env, **overrides}


def ext_stack_cmd(*args: str, timeout: float = 600, **overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(STACK), *args], env=ext_env(**overrides), capture_output=True, text=True, timeout=timeout
    )


def stop_broker(stack_dir: str, sig: signal.Signals) -> float:
    """Signal the instance's Pulsar process group (broker, bookie and ZooKeeper in one JVM) and wait for it to
    exit: SIGTERM runs Pulsar's graceful shutdown, SIGKILL none. Returns the seconds until it exited."""
    pid = int((Path(stack_dir) / "run" / "pulsar.pid").read_text())
    t0 = time.monotonic()
    os.killpg(pid, sig)
    while time.monotonic() - t0 < 120:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"pulsar (pid {pid}) still running 120 s after {sig.name}")


def start_broker(*, extension: bool = True, extra_conf: str = "") -> None:
    """``stack.sh up`` on the instance (S3 is still up): the broker with the extension or stock, and the
    broker.conf lines ``extra_conf`` (space-separated key=value) besides the instance's own."""
    conf = f"{EXT_BROKER_CONF} {extra_conf}".strip()
    r = ext_stack_cmd("up", BROKER_EXTENSION="1" if extension else "0", BROKER_EXTENSION_CONF=conf)
    assert r.returncode == 0, f"extension stack did not start:\n{r.stderr[-3000:]}"


@dataclass(frozen=True)
class ExtStack(Stack):
    stack_dir: str = ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_directory(items, os.path.dirname(__file__), pytest.mark.extension, pytest.mark.integration)


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=3) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.fixture(scope="session")
def ext_stack() -> Iterator[ExtStack]:
    if os.environ.get("LDW_EXTENSION") == "0":
        pytest.skip("LDW_EXTENSION=0: the broker-extension tests are off")
    env = ext_env()
    was_up = _up(f"http://127.0.0.1:{env['WEB_PORT']}/admin/v2/brokers/health")
    r = ext_stack_cmd("up")
    assert r.returncode == 0, f"extension stack did not start:\n{r.stderr[-3000:]}"
    addresses = parse_env(ext_stack_cmd("env").stdout)
    yield ExtStack(**asdict(stack_of(addresses)), stack_dir=env["STACK_DIR"])
    if not was_up and os.environ.get("LDW_EXTENSION_KEEP") != "1":
        ext_stack_cmd("down")


@pytest.fixture
async def ext_admin(ext_stack: ExtStack) -> AsyncIterator[PulsarAdmin]:
    async with admin_for(ext_stack) as a:
        yield a


@pytest.fixture
async def ext_bookie(ext_stack: ExtStack) -> AsyncIterator[BookieClient]:
    async with bookie_for(ext_stack) as b:
        yield b


@pytest.fixture
def ext_harnesses() -> Iterator[list[WorkerHarness]]:
    made: list[WorkerHarness] = []
    yield made
    for h in made:
        h.close()


def worker_on_extension_queue(ext_stack: ExtStack, tmp_path: Path, name: str, **overrides: Any) -> WorkerHarness:
    """A worker draining the queue the extension publishes to (not a harness queue of its own)."""
    topics = {"pending": PENDING, "retry": f"{PENDING}-RETRY", "dlq": f"{PENDING}-DLQ", "parallelism": 4}
    return WorkerHarness(ext_stack, tmp_path, name, topics=topics, **overrides)


def worker_config_file(ext_stack: ExtStack, tmp_path: Path) -> Path:
    """A config for the CLI (scan) against the extension stack."""
    h = worker_on_extension_queue(ext_stack, tmp_path, "cli")
    path = tmp_path / "ext-cli.yaml"
    path.write_text(yaml.safe_dump(h.config))
    return path
