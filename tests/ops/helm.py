"""Real Helm for the tests: the binary `make helm` builds, `helm template` and `helm lint` on a chart directory."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO

# The Kubernetes version charts are rendered for and built-in kinds validated against (kubernetes-validate's schemas).
KUBE_VERSION = "1.30.0"
BUILTIN = {
    "ConfigMap",
    "CronJob",
    "Deployment",
    "PersistentVolumeClaim",
    "Pod",
    "PodDisruptionBudget",
    "Role",
    "RoleBinding",
    "Secret",
    "Service",
    "ServiceAccount",
    "StatefulSet",
}


def helm_binary() -> str:
    """$HELM (what the Makefile exports), else the one `make helm` left in .tools/."""
    env = os.environ.get("HELM")
    if env and Path(env).is_file():
        return env
    found = sorted((REPO / ".tools").glob("helm-*/helm"))
    if not found:
        pytest.fail("helm is missing: `make helm` builds it into .tools/ (make test does)")
    return str(found[-1])


def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([helm_binary(), *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def template(
    chart: Path,
    release: str,
    values: list[Path] | None = None,
    sets: dict[str, Any] | None = None,
    namespace: str = "pulsar",
) -> list[dict[str, Any]]:
    """The chart's manifests as ``helm template`` renders them (every document, parsed)."""
    args = ["template", release, str(chart), "--namespace", namespace, "--kube-version", KUBE_VERSION]
    for v in values or []:
        args += ["-f", str(v)]
    for k, v in (sets or {}).items():
        args += ["--set-string" if isinstance(v, str) else "--set", f"{k}={v}"]
    r = run(*args)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def validate_builtin(doc: dict[str, Any]) -> None:
    """A built-in kind against Kubernetes' own schema, strictly (an unknown field is an error)."""
    assert doc["kind"] in BUILTIN, f"{doc['kind']}: not a built-in kind this test knows"
    kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
