"""deploy/k8s, offline: built-in kinds against Kubernetes' own schemas (kubernetes-validate, strict), the
CRD kinds (KEDA, Prometheus operator) against the fields their documentation specifies, and the
cross-references between the objects (names, labels, ports, secrets, the worker's own config)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO
from tools import dashboards as dashboard
from worker.settings import Settings, load_settings

K8S = REPO / "deploy" / "k8s"
BUILTIN = {"ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "CronJob", "PersistentVolumeClaim"}
SECRET = "ledger-deletion-worker"
SECRET_KEYS = {"pulsar-token", "aws-access-key-id", "aws-secret-access-key"}

# KEDA v2 (keda.sh/docs/latest: concepts/scaling-deployments, scalers/pulsar, concepts/authentication).
KEDA_SCALED_OBJECT_SPEC = {
    "scaleTargetRef",
    "pollingInterval",
    "cooldownPeriod",
    "initialCooldownPeriod",
    "idleReplicaCount",
    "minReplicaCount",
    "maxReplicaCount",
    "fallback",
    "advanced",
    "triggers",
}
KEDA_SCALE_TARGET_REF = {"apiVersion", "kind", "name", "envSourceContainerName"}
KEDA_TRIGGER = {"type", "name", "metadata", "authenticationRef", "metricType", "useCachedMetrics"}
KEDA_PULSAR_METADATA = {
    "adminURL",
    "topic",
    "isPartitionedTopic",
    "subscription",
    "msgBacklogThreshold",
    "activationMsgBacklogThreshold",
    "authModes",
    "oauthTokenURI",
    "scope",
    "clientID",
    "endpointParams",
    "tls",
    "unsafeSsl",
}
KEDA_PULSAR_REQUIRED = {"adminURL", "topic", "subscription"}
KEDA_PULSAR_AUTH_PARAMS = {"bearerToken", "username", "password", "ca", "cert", "key", "keyPassword", "clientSecret"}
KEDA_TRIGGER_AUTH_SPEC = {
    "secretTargetRef",
    "env",
    "hashiCorpVault",
    "azureKeyVault",
    "podIdentity",
    "configMapTargetRef",
    "boundServiceAccountToken",
}
# Prometheus operator monitoring.coreos.com/v1 (prometheus-operator.dev API reference).
SERVICE_MONITOR_SPEC = {
    "jobLabel",
    "targetLabels",
    "podTargetLabels",
    "endpoints",
    "selector",
    "namespaceSelector",
    "sampleLimit",
    "scrapeProtocols",
    "targetLimit",
    "labelLimit",
    "attachMetadata",
}
SERVICE_MONITOR_ENDPOINT = {
    "port",
    "targetPort",
    "path",
    "scheme",
    "params",
    "interval",
    "scrapeTimeout",
    "honorLabels",
    "honorTimestamps",
    "relabelings",
    "metricRelabelings",
    "authorization",
    "bearerTokenSecret",
    "basicAuth",
    "oauth2",
    "tlsConfig",
    "followRedirects",
    "enableHttp2",
    "filterRunning",
}
PROMETHEUS_RULE_GROUP = {"name", "interval", "rules", "limit", "partial_response_strategy", "query_offset"}
PROMETHEUS_RULE = {"alert", "record", "expr", "for", "keep_firing_for", "labels", "annotations"}


def _docs() -> list[tuple[Path, dict[str, Any]]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path, doc))
    return out


@pytest.fixture(scope="module")
def objs() -> dict[str, dict[str, Any]]:
    return {f"{d['kind']}/{d['metadata']['name']}": d for _, d in _docs()}


def _extra(found: dict[str, Any], allowed: set[str]) -> set[str]:
    return set(found) - allowed


@pytest.mark.parametrize("path", sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml"))
def test_builtin_kinds_validate_strictly(path: str) -> None:
    for doc in yaml.safe_load_all((K8S / path).read_text()):
        if doc and doc["kind"] in BUILTIN:
            kubernetes_validate.validate(doc, "1.30.0", strict=True)


def test_kustomization_lists_every_manifest() -> None:
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(k["resources"]) == files


def test_every_kind_is_checked() -> None:
    kinds = {d["kind"] for _, d in _docs()}
    assert kinds == BUILTIN | {"ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PrometheusRule"}


@pytest.fixture(scope="module")
def config(objs: dict[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory) -> Settings:
    """The ConfigMap's worker.yaml, loaded by the worker's own settings (what the pod will do at start)."""
    path = tmp_path_factory.mktemp("cm") / "worker.yaml"
    path.write_text(objs["ConfigMap/ledger-deletion-worker"]["data"]["worker.yaml"])
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LDW_")}
    try:
        return load_settings(str(path))
    finally:
        os.environ.update(saved)


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return dict(obj["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(obj["spec"]["template"]["spec"])


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def test_deployment(objs: dict[str, dict[str, Any]], config: Settings) -> None:
    d = objs["Deployment/ledger-deletion-worker"]
    assert "replicas" not in d["spec"], "KEDA owns the replica count"
    pod = _pod(d)
    assert pod["terminationGracePeriodSeconds"] > config.worker.drain_timeout_s + 5, "SIGKILL before the drain ends"
    assert pod["securityContext"]["runAsNonRoot"] is True
    [c] = pod["containers"]
    assert c["args"][0] == "run"
    port = c["ports"][0]
    assert port["containerPort"] == config.http.port and config.http.host == "0.0.0.0"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["port"] == port["name"] == c["readinessProbe"]["httpGet"]["port"]
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    _check_secrets_and_config(pod, c, config)
    assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()


def _mount_of(pod: dict[str, Any], c: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The container's volume mount ``path`` lies under (the longest match) and its volume."""
    mounts = [
        m for m in c["volumeMounts"] if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert mounts, f"{path} is on no volume"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return mount, next(v for v in pod["volumes"] if v["name"] == mount["name"])


def _check_secrets_and_config(
    pod: dict[str, Any], c: dict[str, Any], config: Settings, *, token_file: bool = False
) -> None:
    env = _env(c)
    secrets = [("AWS_ACCESS_KEY_ID", "aws-access-key-id"), ("AWS_SECRET_ACCESS_KEY", "aws-secret-access-key")]
    if token_file:
        # The nightly jobs' executors read the token from a file themselves: it never travels in a Spark
        # option or closure (worker/nightly/spark.py executor_settings).
        assert "LDW_PULSAR__AUTH_TOKEN" not in env
        path = env["LDW_PULSAR__AUTH_TOKEN_FILE"]["value"]
        mount, vol = _mount_of(pod, c, path)
        assert mount.get("readOnly") is True and vol["secret"]["secretName"] == SECRET
        rel = path[len(mount["mountPath"].rstrip("/")) + 1 :]
        assert {"key": "pulsar-token", "path": rel} in vol["secret"]["items"]
    else:
        secrets.append(("LDW_PULSAR__AUTH_TOKEN", "pulsar-token"))
    for name, key in secrets:
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == (SECRET, key), name
    assert config.pulsar.auth_token is None, "the token belongs in the Secret, not the ConfigMap"
    assert all(t.secret_access_key is None and t.access_key_id is None for t in config.offload.s3_targets)
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert c["args"][c["args"].index("--config") + 1] == f"{mount['mountPath']}/worker.yaml"
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    assert vol["configMap"]["name"] == "ledger-deletion-worker"


def test_pdb_and_service_select_the_worker_pods(objs: dict[str, dict[str, Any]]) -> None:
    labels = objs["Deployment/ledger-deletion-worker"]["spec"]["template"]["metadata"]["labels"]
    pdb = objs["PodDisruptionBudget/ledger-deletion-worker"]["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert "minAvailable" not in pdb, "minAvailable with one replica would block every node drain"
    svc = objs["Service/ledger-deletion-worker"]
    assert svc["spec"]["selector"].items() <= labels.items()
    [c] = _pod(objs["Deployment/ledger-deletion-worker"])["containers"]
    assert svc["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]


def test_service_monitor(objs: dict[str, dict[str, Any]]) -> None:
    sm = objs["ServiceMonitor/ledger-deletion-worker"]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert not _extra(sm["spec"], SERVICE_MONITOR_SPEC)
    svc = objs["Service/ledger-deletion-worker"]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    for ep in sm["spec"]["endpoints"]:
        assert not _extra(ep, SERVICE_MONITOR_ENDPOINT), ep
        assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}
        assert ep.get("path", "/metrics") == "/metrics"
    # The operator's job label defaults to the Service name: the one the dashboard and alerts select.
    assert "jobLabel" not in sm["spec"] and svc["metadata"]["name"] == "ledger-deletion-worker"


def test_prometheus_rule_is_the_rules_file(objs: dict[str, dict[str, Any]]) -> None:
    pr = objs["PrometheusRule/ledger-deletion"]
    assert (K8S / "prometheusrule.yaml").read_text() == dashboard.render_prometheus_rule(
        (REPO / dashboard.RULES).read_text()
    ), "deploy/k8s/prometheusrule.yaml is stale: run `make dashboards`"
    for g in pr["spec"]["groups"]:
        assert not _extra(g, PROMETHEUS_RULE_GROUP)
        for r in g["rules"]:
            assert not _extra(r, PROMETHEUS_RULE), r
            assert ("alert" in r) != ("record" in r) and r["expr"]


def test_keda_scaled_object_follows_the_worker_subscription(objs: dict[str, dict[str, Any]], config: Settings) -> None:
    so = objs["ScaledObject/ledger-deletion-worker"]
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    spec = so["spec"]
    assert not _extra(spec, KEDA_SCALED_OBJECT_SPEC)
    assert not _extra(spec["scaleTargetRef"], KEDA_SCALE_TARGET_REF)
    assert (spec["scaleTargetRef"]["kind"], spec["scaleTargetRef"]["name"]) == ("Deployment", "ledger-deletion-worker")
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    topics = {}
    for t in spec["triggers"]:
        assert not _extra(t, KEDA_TRIGGER) and t["type"] == "pulsar"
        md = t["metadata"]
        assert not _extra(md, KEDA_PULSAR_METADATA), md
        assert KEDA_PULSAR_REQUIRED <= set(md)
        assert all(isinstance(v, str) for v in md.values()), "KEDA trigger metadata values are strings"
        assert md["adminURL"] == str(config.pulsar.admin_url).rstrip("/")
        assert md["subscription"] == config.topics.subscription
        assert int(md["msgBacklogThreshold"]) > 0
        topics[md["topic"]] = md["isPartitionedTopic"]
        if "bearer" in md.get("authModes", ""):
            auth = objs[f"TriggerAuthentication/{t['authenticationRef']['name']}"]
            refs = auth["spec"]["secretTargetRef"]
            assert not _extra(auth["spec"], KEDA_TRIGGER_AUTH_SPEC)
            assert {r["parameter"] for r in refs} <= KEDA_PULSAR_AUTH_PARAMS
            assert {"bearerToken": (SECRET, "pulsar-token")} == {r["parameter"]: (r["name"], r["key"]) for r in refs}
    # Pending (partitioned by topics.parallelism) and retry: the worker subscription's whole backlog.
    assert topics == {config.topics.pending: "true", config.topics.retry: "false"}
    assert config.topics.parallelism > 0


@pytest.mark.parametrize(("name", "command"), [("replay", "replay-dlq"), ("audit", "audit")])
def test_nightly_cronjobs(objs: dict[str, dict[str, Any]], config: Settings, name: str, command: str) -> None:
    cj = objs[f"CronJob/ledger-deletion-{name}"]
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    pod = _pod(cj)
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    [c] = pod["containers"]
    assert c["args"][0] == command
    assert "nightly" in c["image"], "the nightly image (Dockerfile target `nightly`) carries Spark and Java"
    args = c["args"]
    assert args[args.index("--pushgateway") + 1], "the nightly jobs push their results (alerts NightlyMissed/Failed)"
    report_dir = args[args.index("--report-dir") + 1]
    # The report outlives the pod: rows settled (acknowledged) on its strength must stay traceable. A
    # PersistentVolumeClaim of these manifests (or an object store URI), never an emptyDir.
    if not report_dir.startswith("s3a://"):
        _mount, vol = _mount_of(pod, c, report_dir)
        assert "emptyDir" not in vol, f"{report_dir} is on an emptyDir: the report dies with the pod"
        claim = vol["persistentVolumeClaim"]["claimName"]
        pvc = objs[f"PersistentVolumeClaim/{claim}"]
        assert "ReadWriteOnce" in pvc["spec"]["accessModes"] or "ReadWriteMany" in pvc["spec"]["accessModes"]
        assert pvc["spec"]["resources"]["requests"]["storage"]
        assert pod["securityContext"].get("fsGroup") is not None, "the non-root job must be able to write the volume"
    _check_secrets_and_config(pod, c, config, token_file=True)


def test_each_nightly_job_has_a_report_volume_of_its_own(objs: dict[str, dict[str, Any]]) -> None:
    """Two jobs that may overlap (a replay running long into the audit's window) on ReadWriteOnce claims:
    one claim each, so neither waits for the other's node."""
    claims = []
    for name in ("replay", "audit"):
        pod = _pod(objs[f"CronJob/ledger-deletion-{name}"])
        claims += [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert len(claims) == len(set(claims)) == 2


def test_secret_keys_documented() -> None:
    readme = (REPO / "docs" / "operations.md").read_text()
    for key in SECRET_KEYS:
        assert f"--from-literal={key}=" in readme, f"docs/operations.md: the install steps must create {key}"
