"""deploy/k8s, offline: built-in kinds against Kubernetes' own schemas (kubernetes-validate, strict), the
CRD kinds (KEDA, Prometheus operator) against the fields their documentation specifies, the VictoriaMetrics
operator's VMPodScrape against its CRD's schema (tests/ops/vmpodscrape.schema.json: kubernetes-validate has
none), and the cross-references between the objects (names, labels, ports, secrets, the worker's own config).
The optional monitoring components (deploy/k8s/monitoring/) are also built with kustomize (kubectl kustomize)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
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


# Optional monitoring components (kustomize Components, not in the base: a cluster without their CRDs still
# applies deploy/k8s). Each replaces the base's ServiceMonitor (never two scrapes of one replica).
MONITORING = K8S / "monitoring"
COMPONENTS = {
    "podmonitor": ("monitoring.coreos.com/v1", "PodMonitor"),
    "victoriametrics": ("operator.victoriametrics.com/v1beta1", "VMPodScrape"),
}
# Prometheus operator monitoring.coreos.com/v1 PodMonitor (its CRD, prometheus-operator v0.93).
POD_MONITOR_SPEC = {
    "attachMetadata",
    "bodySizeLimit",
    "convertClassicHistogramsToNHCB",
    "fallbackScrapeProtocol",
    "jobLabel",
    "keepDroppedTargets",
    "labelLimit",
    "labelNameLengthLimit",
    "labelValueLengthLimit",
    "namespaceSelector",
    "nativeHistogramBucketLimit",
    "nativeHistogramMinBucketFactor",
    "podMetricsEndpoints",
    "podTargetLabels",
    "sampleLimit",
    "scrapeClass",
    "scrapeClassicHistograms",
    "scrapeNativeHistograms",
    "scrapeProtocols",
    "selector",
    "selectorMechanism",
    "targetLimit",
}
POD_MONITOR_ENDPOINT = {
    "authorization",
    "basicAuth",
    "bearerTokenSecret",
    "enableHttp2",
    "filterRunning",
    "followRedirects",
    "honorLabels",
    "honorTimestamps",
    "interval",
    "metricRelabelings",
    "noProxy",
    "oauth2",
    "params",
    "path",
    "port",
    "portNumber",
    "proxyConnectHeader",
    "proxyFromEnvironment",
    "proxyUrl",
    "relabelings",
    "scheme",
    "scrapeTimeout",
    "targetPort",
    "tlsConfig",
    "trackTimestampsStaleness",
}
VM_POD_SCRAPE_SCHEMA = Path(__file__).with_name("vmpodscrape.schema.json")
# VictoriaMetrics operator VMRule (its CRD, operator v0.74.1): spec.groups[] and groups[].rules[] fields.
VM_RULE_GROUP = {
    "concurrency",
    "eval_alignment",
    "eval_delay",
    "eval_offset",
    "headers",
    "interval",
    "labels",
    "limit",
    "name",
    "notifier_headers",
    "params",
    "rules",
    "tenant",
    "type",
}
VM_RULE = {
    "alert",
    "annotations",
    "debug",
    "expr",
    "for",
    "keep_firing_for",
    "labels",
    "record",
    "update_entries_limit",
}
# The job the dashboard and every alert rule select on.
WORKER_JOB = "ledger-deletion-worker"


def _component(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The component's kustomization and its one scrape object."""
    kustomization = yaml.safe_load((MONITORING / name / "kustomization.yaml").read_text())
    [path] = kustomization["resources"]
    [obj] = [d for d in yaml.safe_load_all((MONITORING / name / path).read_text()) if d]
    return kustomization, obj


def _check_scrapes_the_worker_metrics_port(objs: dict[str, dict[str, Any]], obj: dict[str, Any]) -> None:
    spec = obj["spec"]
    pod_labels = objs["Deployment/ledger-deletion-worker"]["spec"]["template"]["metadata"]["labels"]
    selector = spec["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items(), "does not select the worker pods"
    for name in ("replay", "audit"):  # the nightly jobs push to the Pushgateway: nothing to scrape there
        cj_labels = objs[f"CronJob/ledger-deletion-{name}"]["spec"]["jobTemplate"]["spec"]["template"]["metadata"]
        assert not selector.items() <= cj_labels["labels"].items(), f"selects the {name} job's pods"
    assert "namespaceSelector" not in spec, "the worker pods live in the object's own namespace"
    # job = the value of the pod label named by jobLabel (the default would be "<namespace>/<object name>").
    assert pod_labels[spec["jobLabel"]] == WORKER_JOB
    assert f'job="{WORKER_JOB}"' in (REPO / dashboard.RULES).read_text()
    [c] = _pod(objs["Deployment/ledger-deletion-worker"])["containers"]
    sm_ep = objs["ServiceMonitor/ledger-deletion-worker"]["spec"]["endpoints"][0]
    [ep] = spec["podMetricsEndpoints"]
    assert ep["port"] in {p["name"] for p in c["ports"]}
    assert ep.get("path", "/metrics") == "/metrics" and ep.get("scheme", "http") == "http"
    assert (ep["interval"], ep["scrapeTimeout"]) == (sm_ep["interval"], sm_ep["scrapeTimeout"])


def test_pod_monitor(objs: dict[str, dict[str, Any]]) -> None:
    _, pm = _component("podmonitor")
    assert (pm["apiVersion"], pm["kind"]) == COMPONENTS["podmonitor"]
    assert not _extra(pm["spec"], POD_MONITOR_SPEC)
    for ep in pm["spec"]["podMetricsEndpoints"]:
        assert not _extra(ep, POD_MONITOR_ENDPOINT), ep
    _check_scrapes_the_worker_metrics_port(objs, pm)


def test_vm_pod_scrape(objs: dict[str, dict[str, Any]]) -> None:
    _, vps = _component("victoriametrics")
    assert (vps["apiVersion"], vps["kind"]) == COMPONENTS["victoriametrics"]
    schema = json.loads(VM_POD_SCRAPE_SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.validate(vps, schema)
    _check_scrapes_the_worker_metrics_port(objs, vps)


def test_vm_pod_scrape_schema_rejects_what_the_crd_does() -> None:
    """The schema is strict where the CRD lists fields: Prometheus operator spellings (relabelings, the
    ServiceMonitor's endpoints) are not VMPodScrape fields, a podMetricsEndpoints list is required."""
    schema = json.loads(VM_POD_SCRAPE_SCHEMA.read_text())
    _, vps = _component("victoriametrics")
    bad_endpoint = json.loads(json.dumps(vps))
    bad_endpoint["spec"]["podMetricsEndpoints"][0]["relabelings"] = []
    no_endpoints = json.loads(json.dumps(vps))
    no_endpoints["spec"]["endpoints"] = no_endpoints["spec"].pop("podMetricsEndpoints")
    bad_scheme = json.loads(json.dumps(vps))
    bad_scheme["spec"]["podMetricsEndpoints"][0]["scheme"] = "tcp"
    for doc in (bad_endpoint, no_endpoints, bad_scheme):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema)


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_monitoring_component_is_optional_and_replaces_the_service_monitor(name: str) -> None:
    k = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    assert not any(str(r).startswith("monitoring") for r in k["resources"]), "optional: not in the base"
    kustomization, _ = _component(name)
    assert (kustomization["apiVersion"], kustomization["kind"]) == ("kustomize.config.k8s.io/v1alpha1", "Component")
    deleted = [yaml.safe_load(p["patch"]) for p in kustomization["patches"] if "$patch: delete" in p["patch"]]
    assert deleted == [
        {
            "$patch": "delete",
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "ServiceMonitor",
            "metadata": {"name": "ledger-deletion-worker"},
        }
    ]
    docs = (REPO / "docs" / "operations.md").read_text()
    assert f"deploy/k8s/monitoring/{name}" in docs, "docs/operations.md: how to use the component"


def _kustomize(kubectl: str, overlay: Path) -> list[dict[str, Any]]:
    r = subprocess.run([kubectl, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return [d for d in yaml.safe_load_all(r.stdout) if d]


@pytest.mark.parametrize("name", sorted(COMPONENTS))
def test_monitoring_component_builds_with_kustomize(tmp_path: Path, objs: dict[str, dict[str, Any]], name: str) -> None:
    """What a user's overlay (the base + the component) renders: the base's objects, the ServiceMonitor
    replaced by the component's scrape object, and for VictoriaMetrics the PrometheusRule turned into a VMRule
    of the same groups, so that nothing of monitoring.coreos.com is left."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl missing: its built-in kustomize renders the overlay")
    base = os.path.relpath(K8S, tmp_path)  # kustomize refuses absolute paths
    (tmp_path / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": [base], "components": [f"{base}/monitoring/{name}"]})
    )
    out = _kustomize(kubectl, tmp_path)
    got = {(d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in out}
    base_objs = {(d["apiVersion"], d["kind"], d["metadata"]["name"]) for d in objs.values()}
    service_monitor = ("monitoring.coreos.com/v1", "ServiceMonitor", "ledger-deletion-worker")
    prometheus_rule = ("monitoring.coreos.com/v1", "PrometheusRule", "ledger-deletion")
    want = base_objs - {service_monitor} | {(*COMPONENTS[name], "ledger-deletion-worker")}
    if name == "victoriametrics":
        want = want - {prometheus_rule} | {("operator.victoriametrics.com/v1beta1", "VMRule", "ledger-deletion")}
        assert not any(d["apiVersion"].startswith("monitoring.coreos.com/") for d in out)
        [vmrule] = [d for d in out if d["kind"] == "VMRule"]
        assert vmrule["spec"] == objs["PrometheusRule/ledger-deletion"]["spec"]
        for g in vmrule["spec"]["groups"]:
            assert not _extra(g, VM_RULE_GROUP)
            for r in g["rules"]:
                assert not _extra(r, VM_RULE), r
    assert got == want
    [scrape] = [d for d in out if d["kind"] == COMPONENTS[name][1]]
    assert scrape == _component(name)[1]
