"""``tools.config_reference``: the settings document themselves, and the committed reference and example
config are what the settings say (regenerate with ``make config-reference``)."""

from __future__ import annotations

import yaml

from tools.config_reference import DOC, EXAMPLE, document, example, rows
from worker.settings import load_settings


def test_every_setting_is_described() -> None:
    assert [r.key for r in rows() if not r.description] == []


def test_the_docs_table_is_generated_from_the_settings() -> None:
    assert DOC.read_text() == document(DOC.read_text()), "docs/operations.md is stale: make config-reference"


def test_the_example_config_is_generated_from_the_settings() -> None:
    assert EXAMPLE.read_text() == example(), "config/worker.example.yaml is stale: make config-reference"


def test_the_example_config_loads_and_names_every_key() -> None:
    load_settings(EXAMPLE)
    data = yaml.safe_load(EXAMPLE.read_text())
    keys = {f"{section}.{key}" for section, values in data.items() for key in values}
    expected = {r.key for r in rows() if "[]" not in r.key and r.key.count(".") == 1}
    assert keys == expected
