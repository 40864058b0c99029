"""BookKeeper's stored ledger-metadata record (``worker.formats.ledger_metadata_record``), read and written back as the
recovery does: a record captured from the local stack's bookie (BookKeeper 4.17.2, written by BookKeeper's own Java
client)."""

from __future__ import annotations

import pytest

from worker.formats import ledger_metadata_record as record
from worker.formats.bookkeeper_digest import DigestType
from worker.formats.ledger_metadata import parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError

# An OPEN cursor ledger's record (ledger 1611: CRC32C, empty password, ensemble [bk0test], no ctime stored).
OPEN_RECORD = bytes.fromhex(
    "426f6f6b69654d65746164617461466f726d617456657273696f6e09330aa60108011001180020ffffffffffffffffff0128013"
    "20b0a07626b307465737410003803420048015a1b0a09636f6d706f6e656e74120e6d616e616765642d6c65646765725a2a0a15"
    "70756c7361722f6d616e616765642d6c65646765721211742f6e732f70657273697374656e742f785a140a0d70756c7361722f6"
    "37572736f7212037375625a150a0b6170706c69636174696f6e120670756c73617260c385c7ce87b980e022"
)


def test_a_record_reads_and_writes_back_byte_for_byte() -> None:
    md = record.decode(OPEN_RECORD)
    assert (md.state, md.lastEntryId, md.length, md.password) == (record.OPEN, -1, 0, b"")
    assert record.encode(md) == OPEN_RECORD
    q = record.last_ensemble(md)
    assert (q.ensemble, q.first_entry_id, q.write_quorum, q.ack_quorum) == (("bk0test",), 0, 1, 1)
    assert record.digest_type(md) is DigestType.CRC32C


def test_recovery_rewrites_the_state_and_the_close_only() -> None:
    closed = record.closed(record.in_recovery(record.decode(OPEN_RECORD)), last_entry_id=1, length=14)
    data = record.encode(closed)
    # The pipeline's own parser (the one that decides) reads what the recovery wrote.
    parsed = parse_serialized_metadata(1611, data, 7)
    assert (parsed.state, parsed.length) == ("CLOSED", 14)
    assert parsed.custom_metadata == parse_serialized_metadata(1611, OPEN_RECORD, 7).custom_metadata
    md = record.decode(data)
    md.state, md.lastEntryId, md.length = record.OPEN, -1, 0
    assert record.encode(md) == OPEN_RECORD


def test_fields_this_project_does_not_name_are_written_back() -> None:
    extra = b"\xa8\x06\x07"  # field 101 (varint 7): a field a later BookKeeper might add
    body = OPEN_RECORD[len(record.HEADER) + 2 :] + extra
    data = record.HEADER + bytes([0xA9, 0x01]) + body  # varint(169) = a9 01
    assert len(body) == 169
    assert record.encode(record.closed(record.decode(data), last_entry_id=-1, length=0)).endswith(extra)


@pytest.mark.parametrize(
    "data",
    [b"", b"BookieMetadataFormatVersion\t2\nsomething", record.HEADER + b"\x05abc", OPEN_RECORD[:-3]],
)
def test_a_record_that_is_not_format_3_is_refused(data: bytes) -> None:
    with pytest.raises(MetadataFormatError):
        record.decode(data)
