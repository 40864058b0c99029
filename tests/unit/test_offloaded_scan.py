"""Pulsar's scanOffloadedLedgers answer (worker.formats.offloaded_scan) and its statuses in the audit's words
(worker.core.offloaded_scan_status, worker.commands.scan_offloaded.attempts)."""

from __future__ import annotations

import json

import pytest

from worker.commands.scan_offloaded import attempts
from worker.core.offloaded_scan_status import audit_verdict
from worker.formats.offloaded_scan import ScanAnswerError, parse_offloaded_scan

UUID = "06375a6f-ca49-4ef2-8548-aaece87cfeba"


def _obj(name: str, status: str, size: int, modified: int = 1_000_000) -> dict[str, object]:
    return {
        "ledger": 1320,
        "name": name,
        "uuid": UUID,
        "size": size,
        "lastModified": modified,
        "managedLedgerName": "public/default/persistent/t",
        "userMetadata": {"role": "data", "pulsarclustername": "standalone"},
        "status": status,
    }


def _streamed(objects: list[dict[str, object]], total: int, errors: int, unknown: int) -> str:
    """The answer as Pulsar 4.0.8's broker streams it: an unquoted key, objects back to back, then counters."""
    body = "".join(json.dumps(o) for o in objects)
    return f'{{objects:[\n{body}]\n"total": {total},\n"errors": {errors},\n"unknown": {unknown}\n}}\n'


def test_the_streamed_answer_of_pulsar_4_0_8() -> None:
    objs = [_obj(f"{UUID}-ledger-1320", "OK", 878), _obj(f"{UUID}-ledger-1320-index", "OK", 217)]
    text = _streamed(objs, 2, 0, 0)
    with pytest.raises(ValueError):
        json.loads(text)  # why it needs its own reader
    scan = parse_offloaded_scan(text)
    assert scan.objects == objs and (scan.total, scan.errors, scan.unknown) == (2, 0, 0)


def test_an_empty_bucket_and_a_json_answer() -> None:
    assert parse_offloaded_scan(_streamed([], 0, 0, 0)).objects == []
    doc = {"objects": [_obj("x", "OK", 1)], "total": 1, "errors": 0, "unknown": 0}
    assert parse_offloaded_scan(json.dumps(doc)).objects == doc["objects"]


@pytest.mark.parametrize(
    "text", ["", "<html>502</html>", '{objects:[\n{"ledger": 1}', '{objects:[\n{"ledger": 1}{"ledger"]\n"total": 2}']
)
def test_what_is_not_a_scan_is_refused(text: str) -> None:
    with pytest.raises(ScanAnswerError):
        parse_offloaded_scan(text)


@pytest.mark.parametrize(
    ("status", "old", "want"),
    [
        ("OK", True, ("in_use", None)),
        ("NOT-OFFLOADED", True, ("in_use", None)),
        ("UNKNOWN", True, ("skipped", None)),
        ("NOT-FOUND", True, ("orphan", "not_listed")),
        ("BAD-UUID", True, ("orphan", "uuid_mismatch")),
        ("BAD-UUID", False, ("too_young", None)),
        ("NOT-FOUND", False, ("too_young", None)),
        ("SOMETHING-NEW", True, ("skipped", None)),
    ],
)
def test_audit_verdict(status: str, old: bool, want: tuple[str, str | None]) -> None:
    assert audit_verdict(status, old_enough=old) == want


def test_an_attempt_is_its_objects_together() -> None:
    """The data object and its index are one attempt: bytes summed, the worst status wins."""
    objs = [_obj(f"{UUID}-ledger-1320", "OK", 878), _obj(f"{UUID}-ledger-1320-index", "NOT-FOUND", 217)]
    [a] = attempts(objs, min_age_s=60, now_ms=1_000_000 + 61_000)
    assert (a["ledger_id"], a["uuid"], a["bytes"], a["pulsar_status"]) == (1320, UUID, 1095, "NOT-FOUND")
    assert (a["verdict"], a["orphan_class"]) == ("orphan", "not_listed")
    [young] = attempts(objs, min_age_s=60, now_ms=1_000_000 + 59_000)
    assert young["verdict"] == "too_young"
