"""The answer of Pulsar's ``GET /admin/v2/namespaces/{tenant}/{namespace}/scanOffloadedLedgers``.

The broker streams it (``org.apache.pulsar.broker.admin.v2.Namespaces``): ``{objects:[`` and a newline, one JSON
object per offloaded object written back to back, then ``]`` and the counters ``"total"``, ``"errors"``,
``"unknown"``. In Pulsar 4.0.8 that is not JSON (the ``objects`` key is unquoted, the objects have no commas
between them), so it is read here object by object; a well-formed JSON answer is read as it is.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

_COUNTER = re.compile(r'"(total|errors|unknown)"\s*:\s*(-?\d+)')


class ScanAnswerError(ValueError):
    """The answer is neither JSON nor the streamed form."""


@dataclass(frozen=True)
class OffloadedScan:
    objects: list[dict[str, Any]]
    total: int
    errors: int
    unknown: int


def parse_offloaded_scan(text: str) -> OffloadedScan:
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and isinstance(doc.get("objects"), list):
        objects = doc["objects"]
        return OffloadedScan(
            objects, int(doc.get("total", len(objects))), int(doc.get("errors", 0)), int(doc.get("unknown", 0))
        )
    start = text.find("[")
    if not text.lstrip().startswith("{") or start < 0:
        raise ScanAnswerError(f"not an offloaded-ledgers scan: {text[:200]!r}")
    decoder = json.JSONDecoder()
    objects = []
    i = start + 1
    while True:
        while i < len(text) and text[i] in " \t\r\n,":
            i += 1
        if i >= len(text) or text[i] == "]":
            break
        try:
            obj, i = decoder.raw_decode(text, i)
        except ValueError as e:
            raise ScanAnswerError(f"object {len(objects) + 1} of the scan does not parse: {e}") from e
        if not isinstance(obj, dict):
            raise ScanAnswerError(f"object {len(objects) + 1} of the scan is not an object: {obj!r}")
        objects.append(obj)
    counters = {k: int(v) for k, v in _COUNTER.findall(text[i:])}
    if "total" not in counters:
        raise ScanAnswerError("the scan ended without its counters (cut short?)")
    return OffloadedScan(objects, counters["total"], counters.get("errors", 0), counters.get("unknown", 0))
