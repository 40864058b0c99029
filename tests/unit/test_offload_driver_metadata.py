"""The offload driver-metadata keys (``worker.core.offload_driver_metadata``): built as Pulsar writes them,
read back by the worker's target resolution."""

from __future__ import annotations

import uuid

import pytest

from worker.core.offload_driver_metadata import OffloadLocation, driver_metadata, read_location
from worker.core.verification import resolve_s3_target
from worker.formats.message import OffloadContext
from worker.settings import S3Target

LOCAL = S3Target(bucket="pulsar-offload", region="us-east-1", endpoint="http://127.0.0.1:5000")
AWS = S3Target(bucket="prod-offload", region="eu-west-1")


def test_built_as_the_jcloud_offloader_writes_it() -> None:
    # Read from a Pulsar 4.0.8 offload to the local stack (tests/integration/test_tiered_storage_targets.py).
    assert driver_metadata(LOCAL) == {
        "managedLedgerOffloadDriver": "AWS_S3",
        "bucket": "pulsar-offload",
        "region": "us-east-1",
        "serviceEndpoint": "http://127.0.0.1:5000",
    }
    # Every key is written; an unset one is empty.
    assert driver_metadata(AWS)["serviceEndpoint"] == ""


@pytest.mark.parametrize(
    ("md", "expected"),
    [
        ({}, OffloadLocation(None, None, None)),
        ({"bucket": "", "region": "", "serviceEndpoint": ""}, OffloadLocation(None, None, None)),
        ({"bucket": "b", "region": "r", "serviceEndpoint": "http://e:1"}, OffloadLocation("b", "r", "http://e:1")),
        # purge-topic's earlier key, still read for messages queued before it wrote Pulsar's.
        ({"bucket": "b", "endpoint": "http://e:1"}, OffloadLocation("b", None, "http://e:1")),
        (
            {"bucket": "b", "serviceEndpoint": "http://s:1", "endpoint": "http://e:1"},
            OffloadLocation("b", None, "http://s:1"),
        ),
    ],
)
def test_read_location(md: dict[str, str], expected: OffloadLocation) -> None:
    assert read_location(md) == expected


@pytest.mark.parametrize("target", [LOCAL, AWS])
def test_a_built_map_resolves_to_its_own_target(target: S3Target) -> None:
    ctx = OffloadContext.from_uuid(uuid.uuid4(), target.driver, driver_metadata(target))
    assert resolve_s3_target(ctx, [AWS, LOCAL]) is target
