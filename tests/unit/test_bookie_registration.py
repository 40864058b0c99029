"""Where a bookie listens (``worker.formats.bookie_registration``): its registration as the local stack's bookie wrote
it (BookKeeper 4.17.2), or its id when that is an address."""

from __future__ import annotations

import pytest

from worker.formats.bookie_registration import rpc_address
from worker.formats.protobuf_wire import MetadataFormatError

# The local stack's bookie registration (bookieId bk0test: an id that is no address).
REGISTRATION = bytes.fromhex(
    "32200a0a6874747073657276657210c03e1a093132372e302e302e3122046874747032220a06626f6f6b696510ed181a0931323"
    "72e302e302e31220a626f6f6b69652d727063"
)


def test_where_a_bookie_listens() -> None:
    assert rpc_address("bk0test", REGISTRATION) == ("127.0.0.1", 3181)
    assert rpc_address("10.0.0.5:3181", b"") == ("10.0.0.5", 3181)
    with pytest.raises(MetadataFormatError):
        rpc_address("bk0test", b"")  # no data, and the id is no host:port
