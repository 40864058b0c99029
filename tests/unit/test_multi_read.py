"""The multiRead request's wire format (ZooKeeper's MultiOperationRecord of getData operations, and its
MultiResponse), checked against the framing written out field by field. The same request against the real
ZooKeeper: tests/integration/test_zookeeper_async.py."""

from __future__ import annotations

import struct

import pytest
from kazoo.exceptions import NoAuthError, NoNodeError

from worker.backends.zookeeper import MultiRead


def _header(op: int, done: bool, err: int) -> bytes:
    return struct.pack("!iBi", op, 1 if done else 0, err)


def _string(s: str) -> bytes:
    b = s.encode()
    return struct.pack("!i", len(b)) + b


STAT = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11)


def test_the_request_is_one_get_data_operation_per_path_then_the_end_marker() -> None:
    req = MultiRead(("/ledgers/00/0000/L0001", "/x"))
    assert req.type == 22
    assert bytes(req.serialize()) == (
        _header(4, False, -1) + _string("/ledgers/00/0000/L0001") + b"\x00"
        + _header(4, False, -1) + _string("/x") + b"\x00"
        + _header(-1, True, -1)
    )  # fmt: skip


def test_each_answer_is_data_and_stat_or_its_own_error() -> None:
    body = (
        _header(4, False, 0) + struct.pack("!i", 3) + b"abc" + struct.pack("!qqqqiiiqiiq", *STAT)
        + _header(-1, False, -101) + struct.pack("!i", -101)
        + _header(4, False, 0) + struct.pack("!i", -1) + struct.pack("!qqqqiiiqiiq", *STAT)
        + _header(-1, False, -102) + struct.pack("!i", -102)
        + _header(-1, True, -1)
    )  # fmt: skip
    got = MultiRead.deserialize(b"xx" + body, 2)
    assert len(got) == 4
    data, stat = got[0]  # type: ignore[misc]
    assert data == b"abc" and tuple(stat) == STAT
    assert isinstance(got[1], NoNodeError)
    assert got[2][0] == b""  # type: ignore[index]  # a znode with no data
    assert isinstance(got[3], NoAuthError)


def test_an_answer_of_another_operation_is_refused_not_misread() -> None:
    body = _header(5, False, 0) + struct.pack("!qqqqiiiqiiq", *STAT) + _header(-1, True, -1)
    with pytest.raises(ValueError, match="operation type 5"):
        MultiRead.deserialize(body, 0)
