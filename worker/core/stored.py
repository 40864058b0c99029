"""What storage holds of an announced ledger copy, as the decision sees it: a BookKeeper ledger with its
metadata, offloaded objects with their user metadata, nothing (missing), or a refusal to look (the
message names a place the worker must not connect to)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from worker.formats.ledger_metadata import LedgerMetadata


@dataclass(frozen=True, slots=True)
class StoredLedger:
    """The BookKeeper ledger exists; ``token`` pins what was read (a metadata version) for the delete."""

    metadata: LedgerMetadata
    token: object = None


@dataclass(frozen=True, slots=True)
class StoredObjects:
    """The offloaded copy exists. ``user_metadata`` holds each object's user metadata, which must prove
    the copy belongs to the announced topic; None where the location itself is the proof (a filesystem
    path derived from the announced topic's managed-ledger name)."""

    kind: str  # "s3" | "filesystem"
    locator: Any
    user_metadata: tuple[Mapping[str, str], ...] | None
    # The objects' sizes summed (S3 HEAD Content-Length, the files under the filesystem copy's
    # directory): what deleting them frees (``worker.core.freed_bytes``); None when storage did not say.
    size_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Missing:
    """Storage has nothing: already deleted (by us earlier, or by the broker itself). Only storage that is
    there says so: an offloaded copy is Missing only once its bucket answered HeadBucket, or its base path
    is still the directory it was at start (``worker.backends.tiered_storage``); else the inspection fails."""


@dataclass(frozen=True, slots=True)
class Refused:
    """The message names storage this worker will not touch (an unconfigured bucket, endpoint, driver or a
    path outside the base): nothing was asked of any backend."""

    reason: str


Stored = StoredLedger | StoredObjects | Missing | Refused
