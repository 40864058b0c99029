"""The Apache Pulsar chart's values overlays (deploy/helm/pulsar-values/) as the ops tests read them, and the broker
pod the chart's 4.7.0 broker templates assemble from them (read in the chart's source): shared by
test_pulsar_overlay.py (Pulsar's own files) and test_pulsar_chart_render.py (the real chart)."""

from __future__ import annotations

from typing import Any

import yaml

from tests.conftest import REPO
from tools import helm_chart

# The overlays, by name.
OVERLAYS = {"extension": REPO / helm_chart.OVERLAY, "mark-key": REPO / helm_chart.OVERLAY_MARK_KEY}
# The keys of the Apache chart's broker values the overlays may set (read in its 4.7.0 templates).
CHART_BROKER_KEYS = {"configData", "initContainers", "extraVolumes", "extraVolumeMounts"}
# What an operator's own values for an existing release may hold: the overlay must keep it.
OPERATOR_CONFIG = {"managedLedgerMaxEntriesPerLedger": "50000"}


def overlay(name: str) -> dict[str, Any]:
    """The ``broker`` values of overlay ``name``; it may set nothing else, and only the chart's broker keys."""
    values = yaml.safe_load(OVERLAYS[name].read_text())
    assert set(values) == {"broker"} and set(values["broker"]) <= CHART_BROKER_KEYS, values
    return dict(values["broker"])


def broker_pod(broker: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    """The broker pod spec, its broker container and that container's environment, as the chart's templates
    assemble them from ``broker`` values (test_pulsar_overlay.py's module docstring says how)."""
    env = {**OPERATOR_CONFIG, **{k: str(v) for k, v in (broker.get("configData") or {}).items()}}
    container = {"name": "pulsar-broker", "image": "apachepulsar/pulsar:4.0.12"}
    if broker.get("extraVolumeMounts"):
        container["volumeMounts"] = list(broker["extraVolumeMounts"])
    pod = {"containers": [container], "initContainers": list(broker.get("initContainers") or [])}
    if broker.get("extraVolumes"):
        pod["volumes"] = list(broker["extraVolumes"])
    return pod, container, env
