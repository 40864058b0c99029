"""BookKeeper's ledger metadata, parsed from the bookie HTTP API's JSON or from the metadata store's
serialized record (format versions 2 and 3), without a BookKeeper client."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from worker.errors import BackendError
from worker.formats.protobuf_wire import MetadataFormatError, as_bytes, as_int, as_str, fields, read_varint


@dataclass(frozen=True, slots=True)
class LedgerMetadata:
    ledger_id: int
    custom_metadata: dict[str, str]
    ctime_ms: int | None
    length: int
    state: str
    raw: dict[str, Any] = field(repr=False, default_factory=dict)
    # The last entry once the ledger is CLOSED (-1: empty); None when the metadata does not say.
    last_entry_id: int | None = None


def _decode_custom(raw: dict[str, str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in raw.items():
        try:
            out[k] = base64.b64decode(v, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError, TypeError):
            # Not Pulsar's value: keep it visibly undecodable so identity checks fail closed.
            out[k] = f"<undecodable:{v}>"
    return out


def parse_metadata(ledger_id: int, body: dict[str, Any]) -> LedgerMetadata:
    md = body.get(str(ledger_id))
    if not isinstance(md, dict):
        raise BackendError("bookie", f"metadata response has no entry for ledger {ledger_id}")
    ctime = md.get("ctime")
    return LedgerMetadata(
        ledger_id=ledger_id,
        custom_metadata=_decode_custom(md.get("customMetadata") or {}),
        ctime_ms=int(ctime) if isinstance(ctime, int) and not isinstance(ctime, bool) and ctime > 0 else None,
        length=int(md.get("length") or 0),
        state=str(md.get("state") or ""),
        raw=md,
    )


_FORMAT_HEADER = b"BookieMetadataFormatVersion\t"


_STATES = {1: "OPEN", 2: "IN_RECOVERY", 3: "CLOSED"}


def parse_serialized_metadata(ledger_id: int, data: bytes, znode_ctime_ms: int | None = None) -> LedgerMetadata:
    """BookKeeper's stored form of ledger metadata (LedgerMetadataSerDe, format 3): the line
    ``BookieMetadataFormatVersion\t3`` then a varint-delimited ``LedgerMetadataFormat``
    (bookkeeper-proto DataFormats.proto: length=3, lastEntryId=4, state=5, ctime=10, customMetadata=11
    {key=1, value=2}). Older text formats (1, 2) are refused.

    BookKeeper stores ``ctime`` only when its client is configured to; otherwise the ledger manager
    reports the metadata znode's creation time, and so does this function (``znode_ctime_ms``)."""
    if not data.startswith(_FORMAT_HEADER):
        raise MetadataFormatError("not BookKeeper ledger metadata")
    nl = data.find(b"\n", len(_FORMAT_HEADER))
    if nl < 0 or data[len(_FORMAT_HEADER) : nl] != b"3":
        raise MetadataFormatError(f"unsupported ledger metadata format {data[len(_FORMAT_HEADER) : nl]!r}")
    size, pos = read_varint(data, nl + 1)
    body = data[pos : pos + size]
    if len(body) != size:
        raise MetadataFormatError("truncated ledger metadata")
    custom: dict[str, str] = {}
    length, state, ctime = 0, "", None
    last_entry_id: int | None = None
    for f in fields(body):
        if f.number == 3:
            length = as_int(f)
        elif f.number == 4:
            last_entry_id = as_int(f)
        elif f.number == 5:
            state = _STATES.get(as_int(f), str(as_int(f)))
        elif f.number == 10:
            ctime = as_int(f)
        elif f.number == 11:
            key, value = "", b""
            for g in fields(as_bytes(f)):
                if g.number == 1:
                    key = as_str(g)
                elif g.number == 2:
                    value = as_bytes(g)
            try:
                custom[key] = value.decode("utf-8")
            except UnicodeDecodeError:
                custom[key] = f"<undecodable:{base64.b64encode(value).decode()}>"
    return LedgerMetadata(
        ledger_id=ledger_id,
        custom_metadata=custom,
        ctime_ms=ctime if ctime is not None and ctime > 0 else znode_ctime_ms,
        length=length,
        state=state,
        last_entry_id=last_entry_id,
    )
