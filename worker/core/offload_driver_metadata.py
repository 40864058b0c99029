"""The driver metadata of an offloaded ledger: what names the S3 target its copy went to.

Pulsar's jcloud offloader records, in each offloaded ledger's ``OffloadContext.driverMetadata``, the map
``TieredStorageConfiguration.getOffloadDriverMetadata()`` (beside ``OffloadDriverMetadata.name``, the
``getDriver()`` string, e.g. ``aws-s3``). Read on a Pulsar 4.0.8 offload to the local stack's S3 server::

    {"managedLedgerOffloadDriver": "AWS_S3", "bucket": "pulsar-offload", "region": "us-east-1",
     "serviceEndpoint": "http://127.0.0.1:5000"}

Every key is always written; an unset one is ``""``. ``managedLedgerOffloadDriver`` is the provider's enum
name (``JCloudBlobStoreProvider.toString()``), not the driver string. The worker reads it to pick the
configured target a message names; ``purge-topic`` and ``audit --send`` build it from the configured target,
so their messages carry what the broker would have written.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

#: ``TieredStorageConfiguration.BLOB_STORE_PROVIDER_KEY``
DRIVER_KEY = "managedLedgerOffloadDriver"
#: ``METADATA_FIELD_BUCKET``
BUCKET_KEY = "bucket"
#: ``METADATA_FIELD_REGION``
REGION_KEY = "region"
#: ``METADATA_FIELD_ENDPOINT``
ENDPOINT_KEY = "serviceEndpoint"
#: Read only: ``purge-topic`` wrote the endpoint under this name before it wrote Pulsar's key, and such
#: messages may still wait in a queue or a dead-letter topic.
LEGACY_ENDPOINT_KEY = "endpoint"

# ``JCloudBlobStoreProvider``'s enum names by driver. Only aws-s3's was read on a real broker; the others
# follow the enum's naming. Nothing reads this key back: it is written for fidelity only.
_PROVIDER_NAMES = {"aws-s3": "AWS_S3", "google-cloud-storage": "GOOGLE_CLOUD_STORAGE", "azureblob": "AZURE_BLOB"}


class ConfiguredTarget(Protocol):
    """What the builder needs of a configured S3 target (``worker.settings.S3Target``)."""

    @property
    def driver(self) -> str: ...

    @property
    def bucket(self) -> str: ...

    @property
    def region(self) -> str: ...

    @property
    def endpoint(self) -> object | None: ...


@dataclass(frozen=True, slots=True)
class OffloadLocation:
    """Where a driver-metadata map says the copy is; None for a key absent or empty."""

    bucket: str | None
    region: str | None
    endpoint: str | None


def driver_metadata(target: ConfiguredTarget) -> dict[str, str]:
    """The map Pulsar's offloader would record for an offload to ``target``."""
    endpoint = str(target.endpoint).rstrip("/") if target.endpoint is not None else ""
    return {
        DRIVER_KEY: _PROVIDER_NAMES.get(target.driver.lower(), target.driver.upper().replace("-", "_")),
        BUCKET_KEY: target.bucket,
        REGION_KEY: target.region or "",
        ENDPOINT_KEY: endpoint,
    }


def read_location(md: Mapping[str, str]) -> OffloadLocation:
    """The bucket, region and endpoint a driver-metadata map names (an empty value is an absent one)."""
    return OffloadLocation(
        bucket=md.get(BUCKET_KEY) or None,
        region=md.get(REGION_KEY) or None,
        endpoint=md.get(ENDPOINT_KEY) or md.get(LEGACY_ENDPOINT_KEY) or None,
    )
