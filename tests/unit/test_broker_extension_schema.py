"""The broker extension's Avro schema (a resource of its jar) is the worker's, byte for byte: the Java side
publishes what the Python worker reads, and the broker sees one schema version, not two."""

from __future__ import annotations

import json

from testkit.stack import REPO
from worker.formats.message import AVRO_SCHEMA

RESOURCE = (
    REPO
    / "broker-extension"
    / "src"
    / "main"
    / "resources"
    / "org"
    / "ledgerdeletion"
    / "broker"
    / "PendingDeleteLedgerInfo.avsc"
)


def test_extension_schema_is_the_workers_text() -> None:
    # The topology registers json.dumps(AVRO_SCHEMA); the extension registers the resource, stripped.
    assert RESOURCE.read_text().strip() == json.dumps(AVRO_SCHEMA)
