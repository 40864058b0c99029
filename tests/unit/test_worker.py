"""The library's public API at the package root (``worker/__init__.py``), imported on first use."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import worker


def test_the_public_names_are_the_defining_modules_own() -> None:
    from worker.formats.message import PendingDeleteLedgerInfo
    from worker.operations.phase1 import PendingDeleteSender
    from worker.settings import load_settings

    assert worker.PendingDeleteSender is PendingDeleteSender
    assert worker.PendingDeleteLedgerInfo is PendingDeleteLedgerInfo
    assert worker.load_settings is load_settings
    assert set(worker.__all__) >= {"PendingDeleteSender", "PendingDeleteLedgerInfo", "load_settings", "__version__"}


def test_importing_a_module_does_not_load_the_public_api() -> None:
    # A Spark executor or the daemon imports worker.<module>: the package root must not pull the phase-1
    # library (and the Pulsar client) in with it.
    code = "import sys, worker.core.decision; print('worker.operations.phase1' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_one_version() -> None:
    assert version("ledger-deletion-worker") == worker.__version__
