"""The upgrade test's instance: PROFILE=upgrade-standalone of the local stack (deploy/local/profiles/), a standalone
of its own with the broker extension, started afresh on the default line for each run and moved to the 5.0 line
and back on its own data (``stack.sh restart-pulsar VERSION``). Every test here is marked ``upgrade`` (and
``integration``); ``LDW_PULSAR5=0`` skips them with the rest of the 5.0 subset. ``LDW_UPGRADE_<VAR>`` sets its
``<VAR>``. The long form, a rolling upgrade of the cluster profile under pulsar-perf, is ``make upgrade-test``.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from testkit.stack import Profile, mark_directory, pulsar_line

OLD = pulsar_line("default").version
NEW = pulsar_line("5.0").version
UPGRADE = Profile("upgrade-standalone", {"PULSAR_VERSION": OLD}, prefix="LDW_UPGRADE_")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    mark_directory(items, os.path.dirname(__file__), pytest.mark.upgrade, pytest.mark.integration)


def move_to(version: str) -> None:
    """The instance's Pulsar stopped and started again on ``version``, on the same data (S3 stays up)."""
    r = UPGRADE.run("restart-pulsar", version, timeout=600)
    assert r.returncode == 0, f"restart-pulsar {version} failed:\n{r.stderr[-3000:]}"


@pytest.fixture(scope="session")
def upgrade_addresses() -> Iterator[dict[str, str]]:
    """A fresh instance on the old line (its data and the version it last ran removed), stopped at the end."""
    if os.environ.get("LDW_PULSAR5") == "0":
        pytest.skip("LDW_PULSAR5=0: the Pulsar 5.0 tests are off")
    UPGRADE.down()
    shutil.rmtree(Path(UPGRADE.addresses()["STACK_DIR"]), ignore_errors=True)
    UPGRADE.up()
    try:
        yield UPGRADE.addresses()
    finally:
        UPGRADE.down()
