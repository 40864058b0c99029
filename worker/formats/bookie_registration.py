"""Where a registered bookie listens, from its registration in BookKeeper's metadata store.

A bookie registers under ``<ledgers_root>/available/<bookie id>`` (``available/readonly/<id>`` when read-only);
the znode's data is a ``BookieServiceInfoFormat`` naming its endpoints (bookkeeper-server
``ZKRegistrationManager``). A bookie id is not an address (``bookieId`` may be any name, as the local
stack's ``bk0test``), so the worker connects where the bookie itself says it listens.
"""

from __future__ import annotations

from google.protobuf.message import DecodeError

from worker.formats.bookkeeper_data_formats_pb2 import BookieServiceInfoFormat
from worker.formats.protobuf_wire import MetadataFormatError


def rpc_address(bookie_id: str, registration: bytes) -> tuple[str, int]:
    """Where a registered bookie listens for the BookKeeper protocol, from its registration znode's data
    (``ZKRegistrationClient.deserializeBookieServiceInfo``): a ``BookieServiceInfoFormat`` whose
    ``bookie-rpc`` endpoint names host and port, or, for a bookie that registered with no data (older
    bookies), its id read as ``host:port`` (``BookieServiceInfoUtils.buildLegacyBookieServiceInfo``)."""
    if not registration:
        host, sep, port = bookie_id.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise MetadataFormatError(f"bookie {bookie_id!r} registered no endpoint and its id is no host:port")
        return host, int(port)
    info = BookieServiceInfoFormat()
    try:
        info.ParseFromString(registration)
    except DecodeError as e:
        raise MetadataFormatError(f"registration of bookie {bookie_id!r}: {e}") from e
    for ep in info.endpoints:
        if ep.protocol == "bookie-rpc":
            return ep.host, ep.port
    raise MetadataFormatError(f"bookie {bookie_id!r} publishes no bookie-rpc endpoint")
