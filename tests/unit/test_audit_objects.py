"""The nightly audit of offloaded objects (``worker.nightly.audit_objects``): the object names of offloaded ledgers."""

from __future__ import annotations

from worker.nightly.audit_objects import OFFLOAD_KEY


def test_offload_object_names() -> None:
    u = "0b8a6f9e-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
    m = OFFLOAD_KEY.match(f"{u}-ledger-17")
    assert m and m.group("uuid") == u and m.group("id") == "17" and not m.group("index")
    m = OFFLOAD_KEY.match(f"{u}-ledger-17-index")
    assert m and m.group("index")
    assert OFFLOAD_KEY.match(f"{u}-ledger-x") is None
    assert OFFLOAD_KEY.match(f"prefix/{u}-ledger-1") is None
