"""The overlays rendered with the Apache Pulsar chart's own templates, on a copy of the chart an operator has
(`make helm-overlay-check PULSAR_CHART=<directory of charts/pulsar>`; not in `make test`: no registry these
machines reach serves the chart, and this project commits no third-party code). It checks what
tests/ops/test_pulsar_overlay.py takes from the chart's source: that the broker container's environment, init
containers, volumes and mounts are what the overlays set, after the chart's own, and that the release's own
configData stays."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.ops import helm
from tests.ops.helpers import OPERATOR_CONFIG, OVERLAYS, broker_pod, overlay

pytestmark = pytest.mark.apache_chart

RELEASE = "pulsar"


@pytest.fixture(scope="module")
def chart() -> Path:
    path = os.environ.get("PULSAR_CHART")
    if not path:
        pytest.skip("PULSAR_CHART is not set: make helm-overlay-check PULSAR_CHART=<the chart's charts/pulsar>")
    return Path(path)


def _render(chart: Path, tmp_path: Path, name: str | None) -> list[dict[str, Any]]:
    current = tmp_path / "current.yaml"
    current.write_text(yaml.safe_dump({"broker": {"configData": OPERATOR_CONFIG}}))
    return helm.template(chart, RELEASE, [current, *([OVERLAYS[name]] if name else [])])


def _broker(objs: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], dict[str, str]]:
    [sts] = [o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["name"] == f"{RELEASE}-broker"]
    pod = sts["spec"]["template"]["spec"]
    [c] = [c for c in pod["containers"] if c["name"] == f"{RELEASE}-broker"]
    env: dict[str, str] = {}
    for source in c.get("envFrom") or []:
        [cm] = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == source["configMapRef"]["name"]]
        env.update({k: str(v) for k, v in cm["data"].items()})
    return pod, c, env


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_the_chart_renders_what_the_overlay_tests_assume(chart: Path, tmp_path: Path, name: str) -> None:
    objs = _render(chart, tmp_path, name)
    for obj in objs:
        if obj["kind"] in helm.BUILTIN:
            helm.validate_builtin(obj)
    pod, c, env = _broker(objs)
    want_pod, want_c, want_env = broker_pod(overlay(name))
    assert {k: env.get(k) for k in want_env} == want_env
    assert pod["initContainers"][-len(want_pod["initContainers"]) :] == want_pod["initContainers"]
    assert all(v in pod["volumes"] for v in want_pod.get("volumes", []))
    assert all(m in c["volumeMounts"] for m in want_c.get("volumeMounts", []))
    stock = _broker(_render(chart, tmp_path, None))[0]
    assert stock != pod, "the broker pod template changes: the StatefulSet rolls its brokers on the upgrade"
