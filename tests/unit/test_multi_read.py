"""The multiRead request's wire format (ZooKeeper's MultiOperationRecord of getData operations, and its
MultiResponse), checked against the framing written out field by field. The same request against the real
ZooKeeper: tests/integration/test_zookeeper_async.py."""

from __future__ import annotations

import struct

import pytest
from kazoo.exceptions import NoAuthError, NoNodeError

from worker.backends.multi_read import MultiRead


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


async def test_a_server_without_multi_read_gets_single_reads_from_then_on() -> None:
    """ZooKeeper before 3.6 answers an unknown request type with UNIMPLEMENTED: the reads of that batch,
    and every later batch, are made one by one (same answers), instead of failing forever."""
    from kazoo.exceptions import UnimplementedError

    from worker.backends import zookeeper as zkmod
    from worker.errors import BackendError

    zk = zkmod.ZooKeeper("127.0.0.1:1")  # never started: every call below is replaced
    sent: list[str] = []

    async def call(method: object, *args: object) -> object:
        sent.append(getattr(method, "__name__", str(method)))
        try:
            raise UnimplementedError()
        except UnimplementedError as e:
            raise BackendError("zookeeper", "UnimplementedError") from e

    async def get(path: str) -> tuple[bytes, object] | None:
        sent.append(f"get {path}")
        return None if path.endswith("missing") else (path.encode(), None)

    zk.calls.call = call  # type: ignore[method-assign]
    zk.get = get  # type: ignore[method-assign]
    assert await zk._read_once(["/a", "/missing"]) == [(b"/a", None), None]
    assert sent == ["multi_read_async", "get /a", "get /missing"] and not zk._multi_read
    sent.clear()
    assert await zk._read_once(["/b", "/c"]) == [(b"/b", None), (b"/c", None)]
    assert sent == ["get /b", "get /c"]


async def test_any_other_failure_of_a_multi_read_fails_its_reads_and_keeps_multi_read() -> None:
    from worker.backends import zookeeper as zkmod
    from worker.errors import BackendError

    zk = zkmod.ZooKeeper("127.0.0.1:1")

    async def call(method: object, *args: object) -> object:
        raise BackendError("zookeeper", "no answer within 10s")

    zk.calls.call = call  # type: ignore[method-assign]
    with pytest.raises(BackendError, match="no answer"):
        await zk._read_once(["/a", "/b"])
    assert zk._multi_read
