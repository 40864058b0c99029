"""The Apache Pulsar chart's values overlays (deploy/helm/pulsar-values/), checked with Pulsar's own files for what
a broker pod then runs.

The chart's own templates are not here: no package registry these machines reach serves the Apache Pulsar chart,
and this project commits no third-party code. What its 4.7.0 broker templates do with the values the overlays
set was read in its source and is what :func:`tests.ops.helpers.broker_pod` assembles: ``broker.configData``
becomes the broker ConfigMap, which the broker container takes as its environment (``envFrom``);
``broker.initContainers`` run after the chart's own; ``broker.extraVolumes`` join the pod's volumes and
``broker.extraVolumeMounts`` the broker container's mounts. `make helm-overlay-check PULSAR_CHART=<the chart>`
renders the overlays with a copy of the real chart an operator has (tests/ops/test_pulsar_chart_render.py).

- broker.conf: the broker container starts with `bin/apply-config-from-env.py conf/broker.conf` over that
  environment. The script (Pulsar's docker image, docker/pulsar/scripts) replaces a key broker.conf has
  (commented out or not) by the variable of that name, and adds `<key>` for each PULSAR_PREFIX_<key> variable;
  :func:`apply_config_from_env` applies that rule to the real conf/broker.conf of the Pulsar distribution the
  stack runs (4.0.x, the chart's line), and the result must hold every line the extension needs, with the
  worker's queue settings.
- the classpath: Pulsar's real bin/pulsar, run with that environment and a stand-in `java` that prints its
  arguments, must put the jar on the broker's -cp, at the path where the init container copies it, on a volume
  the broker container mounts; the jar `make broker-extension` builds must hold the class broker.conf names.
- every object the overlays add is a valid Kubernetes object (inside a Pod, validated like the chart's own).
"""

from __future__ import annotations

import os
import re
import subprocess
import zipfile
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.ops import helm
from tests.ops.dockerfile import parse
from tests.ops.helpers import OVERLAYS, broker_pod, overlay
from tools import helm_chart

EXTENSION_JAR = REPO / "broker-extension" / "target" / helm_chart.EXTENSION_JAR


def apply_config_from_env(conf: str, env: dict[str, str], prefix: str = "PULSAR_PREFIX_") -> str:
    """broker.conf as the image's bin/apply-config-from-env.py leaves it (the rule in this module's docstring)."""
    lines = conf.splitlines(keepends=True)
    keys: dict[str, int] = {}
    for i, line in enumerate(lines):
        if "=" in line.strip():
            keys[line.strip().split("=", 1)[0].lstrip("#").strip()] = i
    for k in sorted(env):
        if k in keys:
            lines[keys[k]] = f"{k}={env[k].strip()}\n"
    lines.append("\n")
    for k in sorted(env):
        if k.startswith(prefix):
            key = k[len(prefix) :]
            if key in keys:
                lines[keys[key]] = f"{key}={env[k].strip()}\n"
            else:
                lines.append(f"{key}={env[k].strip()}\n")
    return "".join(lines)


def properties(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            k, v = line.split("=", 1)
            out[k.strip()] = v.strip()
    return out


@pytest.fixture(scope="module")
def pulsar_home() -> Path:
    cache = Path(os.environ.get("STACK_CACHE") or REPO / "deploy" / "local" / ".cache")
    dists = sorted(cache.glob("apache-pulsar-4.0.*/conf/broker.conf"))
    assert dists, "the Pulsar distribution is not unpacked (make stack-up)"
    return dists[-1].parent.parent


def test_the_rule_is_the_scripts(pulsar_home: Path) -> None:
    """apply_config_from_env on the real broker.conf: a key it has is replaced in place (also a commented-out
    one), a key it lacks is dropped unless prefixed, a prefixed one is added."""
    conf = (pulsar_home / "conf" / "broker.conf").read_text()
    assert "\nmanagedLedgerMaxEntriesPerLedger=" in conf and "\n#" in conf
    out = properties(
        apply_config_from_env(
            conf,
            {
                "managedLedgerMaxEntriesPerLedger": "7",
                "ledgerDeletionPendingTopic": "dropped",
                "PULSAR_PREFIX_ledgerDeletionPartitions": "3",
            },
        )
    )
    assert out["managedLedgerMaxEntriesPerLedger"] == "7"
    assert "ledgerDeletionPendingTopic" not in out
    assert out["ledgerDeletionPartitions"] == "3"


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_what_the_overlay_adds_is_valid(name: str) -> None:
    pod, _c, _env = broker_pod(overlay(name))
    helm.validate_builtin({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "pulsar-broker-0"}, "spec": pod})


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_broker_conf_has_the_extensions_lines(pulsar_home: Path, name: str) -> None:
    """The broker.conf a broker pod starts with: the extension on, with the worker's queue settings; and what the
    release already had stays (the operator's own configData)."""
    _pod, _c, env = broker_pod(overlay(name))
    conf = properties(apply_config_from_env((pulsar_home / "conf" / "broker.conf").read_text(), env))
    cfg = yaml.safe_load((REPO / helm_chart.VALUES).read_text())["config"]
    want = {
        "managedLedgerStorageClassName": helm_chart.STORAGE_CLASS,
        "compactionServiceFactoryClassName": helm_chart.COMPACTION_SERVICE_FACTORY,
        "schemaRegistryStorageClassName": helm_chart.SCHEMA_STORAGE_FACTORY,
        "ledgerDeletionPendingTopic": cfg["topics"]["pending"],
        "ledgerDeletionPartitions": str(cfg["topics"]["parallelism"]),
        "ledgerDeletionSubscription": cfg["topics"]["subscription"],
        "ledgerDeletionSendDelaySeconds": str(int(cfg["worker"]["send_delay_s"])),
    }
    assert {k: conf.get(k) for k in want} == want
    assert conf["managedLedgerMaxEntriesPerLedger"] == "50000", "the operator's own configData is kept"
    stock = properties(apply_config_from_env((pulsar_home / "conf" / "broker.conf").read_text(), broker_pod({})[2]))
    assert not any(k.startswith("ledgerDeletion") or k == "managedLedgerStorageClassName" for k in stock)


def _classpath(pulsar_home: Path, env: dict[str, str], tmp_path: Path) -> list[str]:
    """The -cp Pulsar's bin/pulsar gives the broker JVM in that environment (a stand-in java prints its args)."""
    java_home = tmp_path / "java"
    (java_home / "bin").mkdir(parents=True)
    java = java_home / "bin" / "java"
    java.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = "-version" ]; then echo \'openjdk version "17.0.12" 2024-07-16\' >&2; exit 0; fi\n'
        'printf "%s\\n" "$@"\n'
    )
    java.chmod(0o755)
    run_env = {
        **{k: v for k, v in env.items() if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k)},
        "PATH": os.environ["PATH"],
        "JAVA_HOME": str(java_home),
        "PULSAR_LOG_DIR": str(tmp_path / "logs"),
        "PULSAR_GC_LOG_DIR": str(tmp_path / "logs"),
    }
    r = subprocess.run(
        ["bash", str(pulsar_home / "bin" / "pulsar"), "broker"], env=run_env, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    args = r.stdout.splitlines()
    assert "org.apache.pulsar.PulsarBrokerStarter" in args, args
    return args[args.index("-cp") + 1].split(":")


@pytest.mark.parametrize("name", sorted(OVERLAYS))
def test_the_jar_is_on_the_brokers_classpath(pulsar_home: Path, name: str, tmp_path: Path) -> None:
    pod, c, env = broker_pod(overlay(name))
    classpath = _classpath(pulsar_home, env, tmp_path)
    jars = [p for p in classpath if p.endswith(helm_chart.EXTENSION_JAR)]
    assert jars == [env["PULSAR_EXTRA_CLASSPATH"]], classpath
    jar = Path(jars[0])
    # ... on a volume of the broker container ...
    [mount] = [m for m in c["volumeMounts"] if m["mountPath"] == str(jar.parent)]
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume == {"name": mount["name"], "emptyDir": {}}
    # ... where an init container copies it, out of the extension image ...
    copiers = [i for i in pod["initContainers"] if str(jar) in i.get("command", [])]
    assert len(copiers) == 1
    init = copiers[0]
    assert init["command"][0] == "cp" and init["command"][-1] == str(jar)
    assert {"name": mount["name"], "mountPath": str(jar.parent)} in init["volumeMounts"]
    image_jar = init["command"][1]
    [stage] = [s for s in parse(REPO / "Dockerfile") if s.name == "broker-extension"]
    [copy] = stage.all("COPY")
    *_src, dest = copy.split()
    assert image_jar == dest.rstrip("/") + "/" + Path(_src[-1]).name, "the image holds the jar where cp reads it"
    version = yaml.safe_load((REPO / helm_chart.CHART / "Chart.yaml").read_text())["appVersion"]
    assert init["image"] == f"{helm_chart.EXTENSION_IMAGE}:{version}"


def test_the_jar_holds_the_class_broker_conf_names() -> None:
    assert EXTENSION_JAR.is_file(), "the broker extension is not built (make broker-extension)"
    with zipfile.ZipFile(EXTENSION_JAR) as z:
        assert helm_chart.STORAGE_CLASS.replace(".", "/") + ".class" in z.namelist()


def test_mark_key_reaches_the_broker_and_the_worker(pulsar_home: Path) -> None:
    """The mark key overlay: ledgerDeletionMarkKeyFile names a file of the Secret, mounted read-only on the
    broker; the worker chart's brokerMarkKey reads the same key of a Secret of that name."""
    pod, c, env = broker_pod(overlay("mark-key"))
    conf = properties(apply_config_from_env((pulsar_home / "conf" / "broker.conf").read_text(), env))
    path = Path(conf["ledgerDeletionMarkKeyFile"])
    [mount] = [m for m in c["volumeMounts"] if m["mountPath"] == str(path.parent)]
    assert mount["readOnly"] is True
    [volume] = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["secret"]["secretName"] == helm_chart.MARK_KEY_SECRET
    assert {"key": helm_chart.MARK_KEY_ITEM, "path": path.name} in volume["secret"]["items"]
    worker_values = yaml.safe_load((REPO / helm_chart.VALUES).read_text())["brokerMarkKey"]
    assert worker_values["key"] == helm_chart.MARK_KEY_ITEM
    _pod, _c, plain = broker_pod(overlay("extension"))
    assert "PULSAR_PREFIX_ledgerDeletionMarkKeyFile" not in plain
