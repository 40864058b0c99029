"""An entry's digest (``worker.formats.bookkeeper_digest``): an entry captured from the local stack's bookie
(BookKeeper 4.17.2, written by BookKeeper's own Java client), and the master key."""

from __future__ import annotations

import hashlib

import pytest

from worker.formats.bookkeeper_digest import DigestType, EntryDigestMismatch, master_key, verify_entry

# Entry 1 of an open cursor ledger (1611: CRC32C, empty password) as the bookie returned it: header (ledger 1611,
# entry 1, LAC 0, length 14), CRC32C.
ENTRY_1 = bytes.fromhex("000000000000064b00000000000000010000000000000000000000000000000eb7891992656e7472792d31")


def test_an_entry_is_verified_by_its_digest_ledger_and_id() -> None:
    h = verify_entry(ENTRY_1, ledger_id=1611, digest_type=DigestType.CRC32C, password=b"", entry_id=1)
    assert (h.entry_id, h.last_add_confirmed, h.length) == (1, 0, 14)
    assert verify_entry(ENTRY_1, ledger_id=1611, digest_type=DigestType.CRC32C, password=b"").entry_id == 1
    tampered = ENTRY_1[:-1] + b"2"
    for bad, kw in [
        (tampered, {"ledger_id": 1611}),
        (ENTRY_1, {"ledger_id": 1612}),
        (ENTRY_1, {"ledger_id": 1611, "entry_id": 2}),
        (ENTRY_1[:30], {"ledger_id": 1611}),
    ]:
        with pytest.raises(EntryDigestMismatch):
            verify_entry(bad, digest_type=DigestType.CRC32C, password=b"", **kw)  # type: ignore[arg-type]


def test_the_master_key_of_an_empty_password() -> None:
    # MacDigestManager.EMPTY_LEDGER_KEY: SHA-1 of "ledger" (what Pulsar's default managedLedgerPassword gives).
    assert master_key(b"") == hashlib.sha1(b"ledger").digest()
    assert master_key(b"pw") == hashlib.sha1(b"ledgerpw").digest()
