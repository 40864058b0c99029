"""BookKeeper's formats and the recovery's arithmetic, without I/O: records and entries captured from the local
stack's bookie (BookKeeper 4.17.2, written by BookKeeper's own Java client), and the generated protobuf code
checked against its .proto files."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from worker.core.ledger_recovery import (
    Answer,
    Entry,
    Fenced,
    Read,
    RecoveryRefused,
    Reply,
    close_point,
    covered,
    entry_read,
    fenced,
    write_set,
)
from worker.formats import ledger_metadata_record as record
from worker.formats.bookie_registration import rpc_address
from worker.formats.bookkeeper_digest import DigestType, EntryDigestMismatch, master_key, verify_entry
from worker.formats.ledger_metadata import parse_serialized_metadata
from worker.formats.protobuf_wire import MetadataFormatError

FORMATS = Path(__file__).resolve().parents[2] / "worker" / "formats"

# An OPEN cursor ledger's record (ledger 1611: CRC32C, empty password, ensemble [bk0test], no ctime stored).
OPEN_RECORD = bytes.fromhex(
    "426f6f6b69654d65746164617461466f726d617456657273696f6e09330aa60108011001180020ffffffffffffffffff0128013"
    "20b0a07626b307465737410003803420048015a1b0a09636f6d706f6e656e74120e6d616e616765642d6c65646765725a2a0a15"
    "70756c7361722f6d616e616765642d6c65646765721211742f6e732f70657273697374656e742f785a140a0d70756c7361722f6"
    "37572736f7212037375625a150a0b6170706c69636174696f6e120670756c73617260c385c7ce87b980e022"
)
# Entry 1 of that ledger as the bookie returned it: header (ledger 1611, entry 1, LAC 0, length 14), CRC32C.
ENTRY_1 = bytes.fromhex("000000000000064b00000000000000010000000000000000000000000000000eb7891992656e7472792d31")
# The local stack's bookie registration (bookieId bk0test: an id that is no address).
REGISTRATION = bytes.fromhex(
    "32200a0a6874747073657276657210c03e1a093132372e302e302e3122046874747032220a06626f6f6b696510ed181a0931323"
    "72e302e302e31220a626f6f6b69652d727063"
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


def test_where_a_bookie_listens() -> None:
    assert rpc_address("bk0test", REGISTRATION) == ("127.0.0.1", 3181)
    assert rpc_address("10.0.0.5:3181", b"") == ("10.0.0.5", 3181)
    with pytest.raises(MetadataFormatError):
        rpc_address("bk0test", b"")  # no data, and the id is no host:port


# ---- the recovery's arithmetic (BookKeeper's ReadLastConfirmedOp, RRQuorumCoverageSet, PendingReadOp) --------

F, M, X = Answer(Reply.FAILED), Answer(Reply.MISSING), None


def found(entry_id: int, lac: int, length: int) -> Answer:
    return Answer(Reply.FOUND, Entry(entry_id, lac, length))


def test_write_sets_are_round_robin() -> None:
    assert write_set(0, 3, 2) == (0, 1)
    assert write_set(2, 3, 2) == (2, 0)
    assert write_set(7, 5, 3) == (2, 3, 4)


@pytest.mark.parametrize(
    ("answers", "wq", "aq", "ok"),
    [
        ([M], 1, 1, True),
        ([X], 1, 1, False),
        ([M, X, X], 2, 2, False),  # write set (1, 2): both unknown, and two acks confirm an add
        ([M, M, X], 2, 2, True),  # every write set keeps at most one unknown bookie
        ([M, F, M], 3, 2, True),  # one unknown of three: no two acks without a fenced bookie
        ([F, F, M], 3, 2, False),
        ([M, X, M, X], 2, 1, False),  # ack quorum 1: any unknown bookie could have confirmed an add
    ],
)
def test_fencing_covers_every_write_quorum(answers: list[Answer | None], wq: int, aq: int, ok: bool) -> None:
    assert covered(answers, wq, aq) is ok


def test_the_recovery_starts_at_the_largest_last_add_confirmed() -> None:
    start = fenced([found(6, 5, 60), found(5, 4, 50), M], write_quorum=2, ack_quorum=2, first_entry_id=0)
    assert start == Fenced(5, 60)
    # An empty ledger: nothing to recover, closed at -1 with no bytes.
    assert fenced([M, M], write_quorum=2, ack_quorum=2, first_entry_id=0) == Fenced(-1, 0)
    # Never before the last ensemble: the earlier ones are closed and confirmed.
    assert fenced([M], write_quorum=1, ack_quorum=1, first_entry_id=10) == Fenced(9, 0)
    # Not enough answers yet, or none valid.
    assert fenced([found(6, 5, 60), X, X], write_quorum=2, ack_quorum=2, first_entry_id=0) is None
    assert fenced([F], write_quorum=1, ack_quorum=1, first_entry_id=0) is None
    with pytest.raises(RecoveryRefused):
        fenced([M, Answer(Reply.REFUSED)], write_quorum=2, ack_quorum=2, first_entry_id=0)


def test_an_entry_after_the_last_add_confirmed_is_found_or_missing() -> None:
    assert entry_read([M, found(6, 5, 60)], write_quorum=2, ack_quorum=2) is Read.FOUND
    # A confirmed entry has ack-quorum copies: missing on wq - aq + 1 bookies means never confirmed.
    assert entry_read([M, F, F], write_quorum=3, ack_quorum=2) is Read.UNKNOWN
    assert entry_read([M, M, F], write_quorum=3, ack_quorum=2) is Read.MISSING
    assert entry_read([M], write_quorum=1, ack_quorum=1) is Read.MISSING


def test_the_close_is_the_last_entry_found() -> None:
    start = Fenced(5, 50)
    assert close_point(start, []) == (5, 50)
    assert close_point(start, [Entry(6, 5, 60), Entry(7, 6, 72)]) == (7, 72)


# ---- the generated code is the .proto files' ----------------------------------------------------------------


@pytest.mark.skipif(shutil.which("protoc-gen-mypy", path=str(Path(sys.executable).parent)) is None, reason="make venv")
def test_the_generated_protobuf_code_is_current(tmp_path: Path) -> None:
    bin_dir = Path(sys.executable).parent
    protos = sorted(p.name for p in (FORMATS / "proto").glob("*.proto"))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            "-I.",
            f"--python_out={tmp_path}",
            f"--mypy_out={tmp_path}",
            *protos,
        ],
        cwd=FORMATS / "proto",
        check=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin"},
    )
    for made in sorted(tmp_path.iterdir()):
        assert made.read_bytes() == (FORMATS / made.name).read_bytes(), f"{made.name} is stale: make protos"
