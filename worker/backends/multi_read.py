"""ZooKeeper's read-only multi (``multiRead``, ZooKeeper 3.6+): several znodes read in one request.

kazoo sends the write multi (``transaction()``) but not the read one, so this is the request kazoo is
handed (``KazooClient._call`` takes any object with ``type``, ``serialize`` and ``deserialize``). On the
wire it is the write multi's framing with ``getData`` operations: each operation a ``MultiHeader`` and a
``GetDataRequest``; the answer a ``MultiHeader`` per operation, then the operation's ``GetDataResponse``
or an error code. Unlike the write multi, each read is answered on its own: a missing znode fails only its
own operation (ZooKeeper's ``FinalRequestProcessor``, ``OpCode.multiRead``).

Why: every read kazoo makes costs a request's worth of Python in kazoo's connection and callback threads
and a hand-off to the event loop; a batch of messages reading their ledgers' metadata pays that once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from kazoo.exceptions import EXCEPTIONS
from kazoo.protocol.serialization import MultiHeader, ZnodeStat, int_struct, read_buffer, stat_struct, write_string

OP_GET_DATA = 4
OP_ERROR = -1
_END = MultiHeader(-1, True, -1).serialize()


@dataclass(frozen=True, slots=True)
class MultiRead:
    """``getData`` of each path (already chroot-prefixed), answered in order: ``(data, stat)``, or the
    kazoo exception instance that operation failed with (``NoNodeError()`` for a missing znode)."""

    paths: tuple[str, ...]

    type: ClassVar[int] = 22  # OpCode.multiRead

    def serialize(self) -> bytearray:
        b = bytearray()
        head = MultiHeader(OP_GET_DATA, False, -1).serialize()
        for path in self.paths:
            b += head
            b += write_string(path)
            b.append(0)  # no watch
        b += _END
        return b

    @classmethod
    def deserialize(cls, buf: bytes, offset: int) -> list[tuple[bytes, ZnodeStat] | Exception]:
        out: list[tuple[bytes, ZnodeStat] | Exception] = []
        header, offset = MultiHeader.deserialize(buf, offset)
        while not header.done:
            if header.type == OP_GET_DATA:
                data, offset = read_buffer(buf, offset)
                stat = ZnodeStat._make(stat_struct.unpack_from(buf, offset))
                offset += stat_struct.size
                out.append((bytes(data or b""), stat))
            elif header.type == OP_ERROR:
                err = int_struct.unpack_from(buf, offset)[0]
                offset += int_struct.size
                out.append(EXCEPTIONS[err]())
            else:
                raise ValueError(f"unexpected operation type {header.type} in a multiRead answer")
            header, offset = MultiHeader.deserialize(buf, offset)
        return out


def multi_read_async(client: Any, paths: list[str]) -> Any:
    """Send one multiRead on ``client`` (a started ``KazooClient``); kazoo's IAsyncResult of the answers."""
    from kazoo.client import _prefix_root

    result = client.handler.async_result()
    client._call(MultiRead(tuple(_prefix_root(client.chroot, p) for p in paths)), result)
    return result
