"""The admin API client's reading of Pulsar's answers (``worker.broker.admin``): what counts as "not found"."""

from __future__ import annotations

import json

import pytest

from worker.broker.admin import pulsar_not_found_reason


@pytest.mark.parametrize("reason", ["Schema not found", "Schema is deleted"])
def test_the_schema_apis_not_found_answers_are_pulsars_not_found(reason: str) -> None:
    # SchemasResourceBase.convertToSchemaResponse: 404 "Schema not found", or "Schema is deleted" for a
    # tombstone version (4.0.8's GET of the latest answers "Schema not found" for a deleted schema).
    assert pulsar_not_found_reason(json.dumps({"reason": reason})) == reason
