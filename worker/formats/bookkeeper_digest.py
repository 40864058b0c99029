"""What a BookKeeper entry carries besides its payload, and the keys a ledger's password gives.

Every entry is ``ledgerId, entryId, lastAddConfirmed, length`` (four big-endian longs) followed by a digest of
those 32 bytes and the payload, then the payload (bookkeeper-server ``DigestManager``, protocol v3). The
digest is the ledger's ``digestType``: CRC32C (4 bytes), CRC32 (8), HMAC-SHA1 (20, keyed by SHA-1 of ``"mac"``
and the password) or DUMMY (none). The *master key* a bookie demands before it fences a ledger: docs/design.md,
"Open ledgers nothing names".
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import struct
import zlib
from dataclasses import dataclass

import google_crc32c

HEADER_LENGTH = 32  # DigestManager.METADATA_LENGTH
_HEADER = struct.Struct(">qqqq")


class DigestType(enum.IntEnum):
    """``LedgerMetadataFormat.DigestType``'s values."""

    CRC32 = 1
    HMAC = 2
    CRC32C = 3
    DUMMY = 4


_DIGEST_LENGTH = {DigestType.CRC32: 8, DigestType.HMAC: 20, DigestType.CRC32C: 4, DigestType.DUMMY: 0}


class EntryDigestMismatch(ValueError):
    """The bytes are not a valid entry of the expected ledger: too short, wrong digest, another ledger's or
    another entry's."""


@dataclass(frozen=True, slots=True)
class EntryHeader:
    ledger_id: int
    entry_id: int
    last_add_confirmed: int
    length: int  # the ledger's length once this entry is added


def _gen_digest(pad: str, password: bytes) -> bytes:
    return hashlib.sha1(pad.encode() + password).digest()


def master_key(password: bytes) -> bytes:
    """The key a bookie checks before it fences (or adds to) a ledger."""
    return _gen_digest("ledger", password)


def _digest(digest_type: DigestType, password: bytes, data: bytes) -> bytes:
    match digest_type:
        case DigestType.CRC32C:
            return struct.pack(">I", google_crc32c.value(data))
        case DigestType.CRC32:
            return struct.pack(">Q", zlib.crc32(data))
        case DigestType.HMAC:
            return hmac.new(_gen_digest("mac", password), data, hashlib.sha1).digest()
        case DigestType.DUMMY:
            return b""


def verify_entry(
    body: bytes, *, ledger_id: int, digest_type: DigestType, password: bytes, entry_id: int | None = None
) -> EntryHeader:
    """The header of an entry as a bookie returned it, once its digest, ledger id and (unless ``entry_id`` is
    None: a read of the bookie's last entry names none) entry id are checked. Raises
    :class:`EntryDigestMismatch`."""
    n = _DIGEST_LENGTH[digest_type]
    if len(body) < HEADER_LENGTH + n:
        raise EntryDigestMismatch(f"entry of {len(body)} bytes is shorter than its header and digest")
    header, digest, payload = body[:HEADER_LENGTH], body[HEADER_LENGTH : HEADER_LENGTH + n], body[HEADER_LENGTH + n :]
    if not hmac.compare_digest(_digest(digest_type, password, header + payload), digest):
        raise EntryDigestMismatch(f"digest mismatch ({digest_type.name})")
    got = EntryHeader(*_HEADER.unpack(header))
    if got.ledger_id != ledger_id:
        raise EntryDigestMismatch(f"entry of ledger {got.ledger_id}, not {ledger_id}")
    if entry_id is not None and got.entry_id != entry_id:
        raise EntryDigestMismatch(f"entry {got.entry_id}, not {entry_id}")
    return got
