"""The ManagedLedgerInfo / ManagedCursorInfo codec against bytes written by hand and by a real broker."""

from __future__ import annotations

import uuid
import zlib

import cramjam
import pytest
from hypothesis import given
from hypothesis import strategies as st

from testkit.managed_ledger_encoding import encode_managed_cursor_info, encode_managed_ledger_info, without_ledgers
from worker.formats.managed_ledger_metadata import (
    CompressedMetadataError,
    LedgerInfo,
    ManagedCursorInfo,
    ManagedLedgerInfo,
    MetadataFormatError,
    OffloadInfo,
    parse_managed_cursor_info,
    parse_managed_ledger_info,
)
from worker.formats.message import OffloadContext
from worker.formats.metadata_paths import (
    UnsupportedLedgerLayout,
    hierarchical_ledger_path,
    long_hierarchical_ledger_path,
    managed_ledger_path,
    parse_layout,
)
from worker.formats.protobuf_wire import encode_field
from worker.formats.topic_name import TopicName, java_url_encode

# Written by Pulsar 4.0.8 standalone (ZooKeeper metadata) for a topic with 17 messages, 5 entries per
# ledger, after one reload: ledgers 66..69 closed, 70 freshly created (no entries/size, timestamp 0).
BROKER_ML = bytes.fromhex(
    "0a0e0842100518ad0520ef8a8d9ea034"
    "0a0e0843100518ad05208e8b8d9ea034"
    "0a0e0844100518b20520ab8b8d9ea034"
    "0a0e0845100218940220dc9b8d9ea034"
    "0a0408462000"
)
# The same broker's cursor znodes: with a cursor ledger (76), and after a clean close (-1, ten bytes).
BROKER_CURSOR_WITH_LEDGER = bytes.fromhex("084c1049180130d2f78d9ea034")
BROKER_CURSOR_CLOSED = bytes.fromhex("08ffffffffffffffffff011049180130f6868e9ea034")


def test_parses_what_the_broker_wrote() -> None:
    info = parse_managed_ledger_info(BROKER_ML)
    assert info.ledger_ids == (66, 67, 68, 69, 70)
    assert info.ledgers[0] == LedgerInfo(66, entries=5, size=685, timestamp=1795359458671)
    assert info.ledgers[3].entries == 2 and info.ledgers[3].size == 276
    assert info.ledgers[4] == LedgerInfo(70, timestamp=0)
    assert info.terminated_position is None and info.properties == {}
    assert not any(ld.offloaded for ld in info.ledgers)


def test_parses_broker_cursor_znodes() -> None:
    assert parse_managed_cursor_info(BROKER_CURSOR_WITH_LEDGER) == ManagedCursorInfo(
        cursors_ledger_id=76, mark_delete_ledger_id=73, mark_delete_entry_id=1, last_active=1795359472594
    )
    closed = parse_managed_cursor_info(BROKER_CURSOR_CLOSED)
    assert closed.cursors_ledger_id == -1
    assert (closed.mark_delete_ledger_id, closed.mark_delete_entry_id) == (73, 1)


def test_empty_value_is_an_empty_managed_ledger() -> None:
    # The broker creates the znode with no bytes before its first ledger exists.
    assert parse_managed_ledger_info(b"") == ManagedLedgerInfo()


# LedgerInfo{ledgerId=7, entries=5, size=100, timestamp=1, offloadContext{uidMsb=-1, uidLsb=2, complete=true,
# bookkeeperDeleted=false, timestamp=3, driverMetadata{name="aws-s3", properties=[{"bucket","b"}]}}}
OFFLOAD_CTX = (
    "08ffffffffffffffffff01"  # uidMsb = -1 (int64: ten bytes)
    "1002"  # uidLsb = 2
    "1801"  # complete = true
    "2000"  # bookkeeperDeleted = false
    "2803"  # timestamp = 3
    "3215"  # driverMetadata, 21 bytes
    "0a06" + b"aws-s3".hex() + "120b" + "0a06" + b"bucket".hex() + "1201" + b"b".hex()
)
LEDGER_7 = "08071005186420012a" + f"{len(OFFLOAD_CTX) // 2:02x}" + OFFLOAD_CTX
HAND_ML = bytes.fromhex(
    "0a"
    + f"{len(LEDGER_7) // 2:02x}"
    + LEDGER_7  # ledgerInfo: ledger 7, offloaded
    + "0a020808"  # ledgerInfo: ledger 8, nothing else
    + "12040808100a"  # terminatedPosition {8, 10}
    + "1a08"
    + "0a01"
    + b"k".hex()
    + "1203"
    + b"val".hex()  # properties [{"k","val"}]
)


def test_offload_context_and_uuid() -> None:
    info = parse_managed_ledger_info(HAND_ML)
    assert info.ledger_ids == (7, 8)
    ld = info.ledger(7)
    assert ld is not None and ld.offloaded
    assert ld.offload == OffloadInfo(
        uid_msb=-1,
        uid_lsb=2,
        complete=True,
        bookkeeper_deleted=False,
        timestamp=3,
        driver_name="aws-s3",
        driver_metadata={"bucket": "b"},
    )
    # The same two's-complement rule the message's OffloadContext uses, so the uuids compare.
    assert ld.offload.uuid == OffloadContext(-1, 2, "aws-s3").uuid
    assert ld.offload.uuid == uuid.UUID("ffffffff-ffff-ffff-0000-000000000002")
    assert info.ledger(8) == LedgerInfo(8)
    assert info.terminated_position == (8, 10)
    assert info.properties == {"k": "val"}


def test_offload_without_uuid_has_none() -> None:
    assert OffloadInfo().uuid is None
    assert OffloadInfo(uid_lsb=1).uuid == uuid.UUID(int=1)


def test_without_ledgers_keeps_every_other_byte() -> None:
    out = without_ledgers(HAND_ML, [7])
    assert out == HAND_ML[2 + len(LEDGER_7) // 2 :]
    assert parse_managed_ledger_info(out).ledger_ids == (8,)
    assert without_ledgers(HAND_ML, []) == HAND_ML
    assert without_ledgers(HAND_ML, [999]) == HAND_ML  # absent ids: nothing to remove


def test_without_ledgers_on_broker_bytes() -> None:
    out = without_ledgers(BROKER_ML, {67, 69})
    info = parse_managed_ledger_info(out)
    assert info.ledger_ids == (66, 68, 70)
    assert info.ledgers == tuple(
        ld for ld in parse_managed_ledger_info(BROKER_ML).ledgers if ld.ledger_id in (66, 68, 70)
    )
    assert without_ledgers(out, {67, 69}) == out  # idempotent


def test_unknown_fields_survive_an_edit() -> None:
    # A newer Pulsar's fields (top-level field 15 varint, field 16 bytes, field 17 fixed64, field 18 fixed32,
    # and an unknown field 9 inside the kept LedgerInfo) must come out exactly as they went in.
    unknown_top = "7801" + "820103616263" + "8901" + "0102030405060708" + "9501" + "01020304"
    kept = "0a06" + "0809" + "4a026869"  # LedgerInfo{ledgerId=9, field 9 = "hi"}
    data = bytes.fromhex("0a020807" + unknown_top + kept)
    out = without_ledgers(data, [7])
    assert out == bytes.fromhex(unknown_top + kept)
    assert parse_managed_ledger_info(out).ledger_ids == (9,)


def test_groups_are_skipped() -> None:
    # A deprecated proto2 group (field 20: start 0xa3 0x01, end 0xa4 0x01) containing a varint.
    data = bytes.fromhex("0a020807" + "a3010801a401")
    assert parse_managed_ledger_info(data).ledger_ids == (7,)
    assert without_ledgers(data, [7]) == bytes.fromhex("a3010801a401")


def compressed(compression: int, payload: bytes, size: int) -> bytes:
    """MetaStoreImpl's compressed form: magic 0x4778, 4-byte metadata size, {compressionType, uncompressedSize}."""
    meta = encode_field(1, compression) + encode_field(2, size)
    return bytes.fromhex("4778") + len(meta).to_bytes(4, "big") + meta + payload


def _zlib_sync_flushed(data: bytes) -> bytes:  # pulsar-common's CompressionCodecZLib: Deflater, SYNC_FLUSH, no end
    c = zlib.compressobj()
    return c.compress(data) + c.flush(zlib.Z_SYNC_FLUSH)


CODECS = {
    "LZ4": (1, lambda d: bytes(cramjam.lz4.compress_block(d, store_size=False))),  # a raw block, as airlift's
    "ZLIB": (2, _zlib_sync_flushed),
    "ZSTD": (3, lambda d: bytes(cramjam.zstd.compress(d))),
    "SNAPPY": (4, lambda d: bytes(cramjam.snappy.compress_raw(d))),
}


@pytest.mark.parametrize("codec", sorted(CODECS))
def test_compressed_values_read_as_the_broker_reads_them(codec: str) -> None:
    number, compress = CODECS[codec]
    ml = encode_managed_ledger_info(
        ManagedLedgerInfo(tuple(LedgerInfo(i, 5, 100, 1_700_000_000_000 + i, None) for i in range(1, 2000)))
    )
    got = parse_managed_ledger_info(compressed(number, compress(ml), len(ml)))
    assert got.ledger_ids == tuple(range(1, 2000))
    cursor = encode_managed_cursor_info(ManagedCursorInfo(42, 41, 3, None, {}, {}))
    assert parse_managed_cursor_info(compressed(number, compress(cursor), len(cursor))).cursors_ledger_id == 42
    with pytest.raises(CompressedMetadataError, match=codec):  # an editor never rewrites a compressed value
        without_ledgers(compressed(number, compress(ml), len(ml)), [1])


def test_damaged_compressed_values_are_refused_clearly() -> None:
    ml = encode_managed_ledger_info(ManagedLedgerInfo((LedgerInfo(7, 5, 100, 1, None),)))
    lz4 = bytes(cramjam.lz4.compress_block(ml, store_size=False))
    with pytest.raises(CompressedMetadataError, match=r"LZ4: its payload does not decompress"):
        parse_managed_ledger_info(compressed(1, lz4[:-2], len(ml)))
    with pytest.raises(CompressedMetadataError, match="where the header says"):
        parse_managed_ledger_info(compressed(3, bytes(cramjam.zstd.compress(ml)), len(ml) + 5))
    with pytest.raises(CompressedMetadataError, match="a codec Pulsar did not have"):
        parse_managed_ledger_info(compressed(9, ml, len(ml)))
    with pytest.raises(CompressedMetadataError, match="claims"):
        parse_managed_ledger_info(compressed(1, lz4, 1 << 30))
    with pytest.raises(CompressedMetadataError, match="cut short"):
        parse_managed_cursor_info(bytes.fromhex("4778" + "00000009" + "0801"))


@pytest.mark.parametrize(
    "hexdata",
    [
        "0a05",  # length beyond the end
        "0a021001",  # LedgerInfo without ledgerId
        "08",  # truncated varint (top level field 1 as varint also has the wrong wire type)
        "0f",  # wire type 7
        "00",  # field number 0
        "0affffffffffffffffffffff01",  # varint longer than ten bytes
        "0a0308ff",  # truncated varint inside a LedgerInfo
        "0a020a00",  # ledgerId with the wrong wire type
    ],
)
def test_malformed_values_raise(hexdata: str) -> None:
    with pytest.raises(MetadataFormatError):
        parse_managed_ledger_info(bytes.fromhex(hexdata))


def test_cursor_without_ledger_id_is_malformed() -> None:
    with pytest.raises(MetadataFormatError, match="cursorsLedgerId"):
        parse_managed_cursor_info(bytes.fromhex("1001"))


# ---- round trips of the encoder ---------------------------------------------------------------------

int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
opt64 = st.none() | int64
text = st.text(max_size=12)
offloads = st.builds(
    OffloadInfo,
    uid_msb=opt64,
    uid_lsb=opt64,
    complete=st.booleans(),
    bookkeeper_deleted=st.booleans(),
    timestamp=opt64,
    driver_name=st.none() | text,
    driver_metadata=st.dictionaries(text, text, max_size=3),
).filter(lambda o: o.driver_name is not None or not o.driver_metadata)  # metadata needs its required name
ledgers = st.builds(
    LedgerInfo, ledger_id=int64, entries=opt64, size=opt64, timestamp=opt64, offload=st.none() | offloads
)
infos = st.builds(
    ManagedLedgerInfo,
    ledgers=st.lists(ledgers, max_size=8).map(tuple),
    terminated_position=st.none() | st.tuples(int64, int64),
    properties=st.dictionaries(text, text, max_size=3),
)
cursors = st.builds(
    ManagedCursorInfo,
    cursors_ledger_id=int64,
    mark_delete_ledger_id=opt64,
    mark_delete_entry_id=opt64,
    last_active=opt64,
    cursor_properties=st.dictionaries(text, text, max_size=3),
    position_properties=st.dictionaries(text, int64, max_size=3),
)


@given(infos)
def test_managed_ledger_info_round_trip(info: ManagedLedgerInfo) -> None:
    assert parse_managed_ledger_info(encode_managed_ledger_info(info)) == info


@given(cursors)
def test_managed_cursor_info_round_trip(c: ManagedCursorInfo) -> None:
    assert parse_managed_cursor_info(encode_managed_cursor_info(c)) == c


@given(infos, st.data())
def test_without_ledgers_removes_exactly_the_ids(info: ManagedLedgerInfo, data: st.DataObject) -> None:
    ids = data.draw(st.sets(st.sampled_from(info.ledger_ids) if info.ledger_ids else st.nothing()) | st.just(set()))
    out = parse_managed_ledger_info(without_ledgers(encode_managed_ledger_info(info), ids))
    assert out.ledgers == tuple(ld for ld in info.ledgers if ld.ledger_id not in ids)
    assert out.terminated_position == info.terminated_position
    assert out.properties == info.properties


# ---- where the metadata lives (worker.backends.zookeeper's pure functions) ----------------------------------------


@pytest.mark.parametrize(
    ("ledger_id", "path"),
    [
        (42, "/ledgers/00/0000/L0042"),
        (1234567890, "/ledgers/12/3456/L7890"),
        (2**31 - 2, "/ledgers/21/4748/L3646"),
        # BookKeeper switches at `id < Integer.MAX_VALUE`: MAX_VALUE itself is already a long path.
        (2**31 - 1, "/ledgers/000/0000/0021/4748/L3647"),
        (2**63 - 1, "/ledgers/922/3372/0368/5477/L5807"),
    ],
)
def test_hierarchical_ledger_path(ledger_id: int, path: str) -> None:
    assert hierarchical_ledger_path(ledger_id) == path


def test_long_hierarchical_ledger_path_and_bad_ids() -> None:
    assert long_hierarchical_ledger_path(42, "/bk/ledgers") == "/bk/ledgers/000/0000/0000/0000/L0042"
    for bad in (-1, 2**63):
        with pytest.raises(ValueError):
            hierarchical_ledger_path(bad)


def test_ledger_layout() -> None:
    # The LAYOUT znode of the local stack, verbatim.
    live = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1"
    assert parse_layout(live) is hierarchical_ledger_path
    assert parse_layout(b"2\norg.apache.bookkeeper.meta.LongHierarchicalLedgerManagerFactory:1\n") is (
        long_hierarchical_ledger_path
    )
    with pytest.raises(UnsupportedLedgerLayout, match="FlatLedgerManagerFactory"):
        parse_layout(b"2\norg.apache.bookkeeper.meta.FlatLedgerManagerFactory:1")
    with pytest.raises(UnsupportedLedgerLayout):
        parse_layout(b"garbage")


def test_managed_ledger_path_encodes_like_java() -> None:
    # Java's URLEncoder: space -> '+', '*' kept, '~' and every other byte percent-encoded (UTF-8).
    assert java_url_encode("a b~c*d.e-f_g/é") == "a+b%7Ec*d.e-f_g%2F%C3%A9"
    topic = TopicName.parse("persistent://t/ns/my topic")
    assert managed_ledger_path(topic) == "/managed-ledgers/t/ns/persistent/my+topic"
