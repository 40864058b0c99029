"""Two-phase ledger deletion for stock Apache Pulsar (README.md, docs/design.md).

The library's public API is here (``from worker import PendingDeleteLedgerInfo, PendingDeleteSender,
load_settings``); its names are imported on first use, so that ``import worker.<module>`` (the daemon, a
Spark executor) does not load the Pulsar client through this package.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_PUBLIC = {
    "PendingDeleteSender": "worker.operations.phase1",
    "BatchResult": "worker.operations.phase1",
    "SendFailed": "worker.operations.phase1",
    "MetadataUpdateFailed": "worker.operations.phase1",
    "send_pending_delete": "worker.operations.phase1",
    "PendingDeleteLedgerInfo": "worker.formats.message",
    "LedgerComponent": "worker.formats.message",
    "LedgerType": "worker.formats.message",
    "OffloadContext": "worker.formats.message",
    "Settings": "worker.settings",
    "ConfigError": "worker.settings",
    "load_settings": "worker.settings",
}

__all__ = ["__version__", *_PUBLIC]

if TYPE_CHECKING:
    # "X as X": re-exported names for type checkers (ruff's F401 reads a computed __all__ as empty).
    from worker.formats.message import LedgerComponent as LedgerComponent
    from worker.formats.message import LedgerType as LedgerType
    from worker.formats.message import OffloadContext as OffloadContext
    from worker.formats.message import PendingDeleteLedgerInfo as PendingDeleteLedgerInfo
    from worker.operations.phase1 import BatchResult as BatchResult
    from worker.operations.phase1 import MetadataUpdateFailed as MetadataUpdateFailed
    from worker.operations.phase1 import PendingDeleteSender as PendingDeleteSender
    from worker.operations.phase1 import SendFailed as SendFailed
    from worker.operations.phase1 import send_pending_delete as send_pending_delete
    from worker.settings import ConfigError as ConfigError
    from worker.settings import Settings as Settings
    from worker.settings import load_settings as load_settings


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'worker' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
