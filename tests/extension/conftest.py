"""The broker-extension suite's instance: PROFILE=extension of the local stack (deploy/local/profiles/extension.env),
a standalone of its own whose broker runs the broker extension (broker-extension/), beside the shared stack.

Every test here is marked ``extension`` (and ``integration``). The session fixture starts the instance (about
20 s and one JVM) if it is not up, and stops it after the last test unless it was already up or
``LDW_EXTENSION_KEEP=1``; ``LDW_EXTENSION=0`` skips these tests, saying so. ``LDW_EXT_<VAR>`` sets its
``<VAR>`` (``LDW_EXT_WEB_PORT``, ...); the same jar runs on every line ``stack.sh`` can start
(``LDW_EXT_PULSAR_VERSION``, else ``PULSAR_VERSION``; a line other than the default one keeps its data apart).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from testkit.harness import WorkerHarness
from testkit.stack import (
    REPO,
    Profile,
    admin_for,
    bookie_for,
    line_of,
    mark_directory,
    pulsar_line,
    running,
    stack_of,
)
from tests.conftest import Stack
from worker.backends.bookie_http import BookieClient
from worker.broker.admin import PulsarAdmin

# The extension's own queue (its default): what the broker publishes to.
PENDING = "persistent://pulsar/system/__ledger_deletion"


def _extension() -> Profile:
    default = pulsar_line("default").version
    version = os.environ.get("LDW_EXT_PULSAR_VERSION", os.environ.get("PULSAR_VERSION", default))
    placement = {"PULSAR_VERSION": version}
    line = line_of(version)
    if version != default and not (line and line.placement):
        # Another line on data of its own (deploy/local/pulsar-lines.txt's placement gives 5.0 its own).
        placement["STACK_DIR"] = str(REPO / "deploy" / "local" / f".data-extension-{version}")
    return Profile("extension", placement, prefix="LDW_EXT_", off="LDW_EXTENSION", keep="LDW_EXTENSION_KEEP")


EXTENSION = _extension()


def restart_broker(extra_conf: str = "") -> None:
    """``stack.sh restart-pulsar`` on the instance: its broker (with its bookie and ZooKeeper) again, on the same
    data, with the broker.conf lines ``extra_conf`` (space-separated key=value) besides its own; S3 stays."""
    r = EXTENSION.run("restart-pulsar", BROKER_EXTENSION_CONF=extra_conf)
    assert r.returncode == 0, f"the extension instance did not restart:\n{r.stderr[-3000:]}"


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
    EXTENSION.up(BROKER_EXTENSION="1" if extension else "0", BROKER_EXTENSION_CONF=extra_conf)


@dataclass(frozen=True)
class ExtStack(Stack):
    stack_dir: str = ""
    # The Pulsar its broker runs (stack.sh env's PULSAR_VERSION): what the extension writes as pulsar_version.
    pulsar_version: str = ""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_directory(items, os.path.dirname(__file__), pytest.mark.extension, pytest.mark.integration)


@pytest.fixture(scope="session")
def ext_stack() -> Iterator[ExtStack]:
    with running(EXTENSION) as addresses:
        yield ExtStack(
            **asdict(stack_of(addresses)),
            stack_dir=addresses["STACK_DIR"],
            pulsar_version=addresses["PULSAR_VERSION"],
        )


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
