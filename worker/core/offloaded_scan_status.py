"""What Pulsar's offloaded-object scanner (``scanOffloadedLedgers``) says of an object, in the audit's words
(the statuses: docs/nightly.md, "Pulsar's offloaded-object scanner beside the audit"). The audit
(``worker.nightly.audit_objects``) tells topic gone from ledger gone and keeps what is younger than its
minimum age (an offload may be running): Pulsar does neither.
"""

from __future__ import annotations

import enum


class PulsarScanStatus(enum.StrEnum):
    OK = "OK"
    NOT_FOUND = "NOT-FOUND"
    BAD_UUID = "BAD-UUID"
    NOT_OFFLOADED = "NOT-OFFLOADED"
    UNKNOWN = "UNKNOWN"


def audit_verdict(status: str, *, old_enough: bool) -> tuple[str, str | None]:
    """(verdict, orphan class) the audit gives an offload attempt Pulsar reported as ``status``. ``NOT-FOUND``
    is ``not_listed``: the audit's ``topic_gone`` or ``ledger_gone``, which Pulsar does not tell apart. A
    listed ledger not marked offloaded is in use (the worker's rule: no uuid recorded, an offload may be
    running); a young object is never an orphan."""
    try:
        s = PulsarScanStatus(status)
    except ValueError:
        return "skipped", None
    if s in (PulsarScanStatus.OK, PulsarScanStatus.NOT_OFFLOADED):
        return "in_use", None
    if s is PulsarScanStatus.UNKNOWN:
        return "skipped", None
    if not old_enough:
        return "too_young", None
    return "orphan", "uuid_mismatch" if s is PulsarScanStatus.BAD_UUID else "not_listed"
