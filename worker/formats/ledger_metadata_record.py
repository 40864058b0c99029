"""A ledger's metadata record as BookKeeper stores it (format version 3), read and written back whole.

The stored bytes are the line ``BookieMetadataFormatVersion\\t3`` then a varint-delimited
``LedgerMetadataFormat`` (bookkeeper-server ``LedgerMetadataSerDe``). Recovering an open ledger rewrites its
state (OPEN -> IN_RECOVERY -> CLOSED, with ``lastEntryId`` and ``length`` on the close), as BookKeeper's own
recovery does; every other field, including any this project's .proto does not name, is written back as it
was read (protobuf keeps unknown fields). The read-only parse the pipeline uses on every message stays
``worker.formats.ledger_metadata.parse_serialized_metadata``.
"""

from __future__ import annotations

from dataclasses import dataclass

from google.protobuf.message import DecodeError

from worker.formats.bookkeeper_data_formats_pb2 import LedgerMetadataFormat
from worker.formats.bookkeeper_digest import DigestType
from worker.formats.protobuf_wire import MetadataFormatError, encode_varint, read_varint

HEADER = b"BookieMetadataFormatVersion\t3\n"
OPEN, IN_RECOVERY, CLOSED = LedgerMetadataFormat.OPEN, LedgerMetadataFormat.IN_RECOVERY, LedgerMetadataFormat.CLOSED


def decode(data: bytes) -> LedgerMetadataFormat:
    """Raises :class:`MetadataFormatError` for anything but a well-formed format-3 record."""
    if not data.startswith(HEADER):
        raise MetadataFormatError("not BookKeeper ledger metadata of format version 3")
    size, pos = read_varint(data, len(HEADER))
    if pos + size != len(data):
        raise MetadataFormatError("ledger metadata length does not match its record")
    md = LedgerMetadataFormat()
    try:
        md.ParseFromString(data[pos:])
    except DecodeError as e:
        raise MetadataFormatError(f"ledger metadata: {e}") from e
    return md


def encode(md: LedgerMetadataFormat) -> bytes:
    """The stored form of ``md`` (``writeDelimitedTo`` after the format line, as ``LedgerMetadataSerDe``)."""
    body = md.SerializeToString()
    return HEADER + encode_varint(len(body)) + body


def in_recovery(md: LedgerMetadataFormat) -> LedgerMetadataFormat:
    """``md`` marked IN_RECOVERY (``LedgerMetadataBuilder.withInRecoveryState``): from then on its writer's
    ensemble changes fail, so the ensemble the recovery fences is the last one."""
    out = LedgerMetadataFormat()
    out.CopyFrom(md)
    out.state = IN_RECOVERY
    return out


def closed(md: LedgerMetadataFormat, *, last_entry_id: int, length: int) -> LedgerMetadataFormat:
    """``md`` closed at ``last_entry_id`` with ``length`` bytes
    (``withClosedState().withLastEntryId(..).withLength(..)``)."""
    out = LedgerMetadataFormat()
    out.CopyFrom(md)
    out.state = CLOSED
    out.lastEntryId = last_entry_id
    out.length = length
    return out


@dataclass(frozen=True, slots=True)
class Quorum:
    """How a ledger's entries are spread over its last ensemble (round robin: entry e goes to bookies
    ``(e + i) % ensemble_size`` for i < write_quorum, and is confirmed by ``ack_quorum`` of them)."""

    ensemble: tuple[str, ...]  # bookie ids, in ensemble order
    first_entry_id: int  # the first entry written to this ensemble
    write_quorum: int
    ack_quorum: int


def last_ensemble(md: LedgerMetadataFormat) -> Quorum:
    """The ensemble a writer of ``md`` writes to now (the segment with the largest first entry). A record
    without ``ackQuorumSize`` is an old one whose ack quorum was its write quorum (``LedgerMetadataSerDe``)."""
    if not md.segment:
        raise MetadataFormatError("ledger metadata has no ensemble")
    seg = max(md.segment, key=lambda s: s.firstEntryId)
    members = tuple(seg.ensembleMember)
    write_quorum = md.quorumSize
    ack_quorum = md.ackQuorumSize if md.HasField("ackQuorumSize") else write_quorum
    if len(members) != md.ensembleSize or not 0 < ack_quorum <= write_quorum <= len(members):
        raise MetadataFormatError(
            f"ensemble of {len(members)} with ensembleSize {md.ensembleSize}, write quorum {write_quorum}, "
            f"ack quorum {ack_quorum}"
        )
    return Quorum(members, seg.firstEntryId, write_quorum, ack_quorum)


def digest_type(md: LedgerMetadataFormat) -> DigestType | None:
    """The ledger's digest type; None when the record keeps no password (then neither its digest nor its
    master key can be known)."""
    if not md.HasField("password") or not md.HasField("digestType"):
        return None
    return DigestType(md.digestType)
