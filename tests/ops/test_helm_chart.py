"""The Helm chart (deploy/helm/ledger-deletion-worker), rendered by real Helm (`make helm`) in the ways operators
install it: built-in kinds against Kubernetes' own schemas (kubernetes-validate, strict), the CRD kinds (KEDA,
Prometheus operator) against the fields their documentation specifies, the VictoriaMetrics operator's VMPodScrape
against its CRD's schema (tests/ops/vmpodscrape.schema.json: kubernetes-validate has none), and the
cross-references between the objects (names, labels, ports, secrets, the worker's own configuration loaded by
its own settings). `helm lint --strict` on every variant; values.schema.json refuses what the settings refuse."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.conftest import REPO
from tests.ops import helm
from tools import dashboards as dashboard
from tools import helm_chart
from worker.settings import Settings, load_settings

CHART = REPO / "deploy" / "helm" / "ledger-deletion-worker"
SECRET = "ledger-deletion-worker"
SECRET_KEYS = {"pulsar-token", "aws-access-key-id", "aws-secret-access-key"}
# The job the dashboard and every alert rule select on, whatever the release is called.
WORKER_JOB = "ledger-deletion-worker"

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

Objects = dict[str, dict[str, Any]]

# The ways an operator installs the chart: (release name, --set values).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "default": ("ledger-deletion-worker", {}),
    # another release name: every object is prefixed, the scrape job stays ledger-deletion-worker
    "renamed": ("ldw", {}),
    "keda-podmonitor": (
        "ledger-deletion-worker",
        {"autoscaling.keda.enabled": True, "monitoring.scrape": "PodMonitor", "monitoring.labels.release": "kps"},
    ),
    "victoriametrics": ("ldw", {"monitoring.scrape": "VMPodScrape", "monitoring.rules": "VMRule"}),
    "mark-key": ("ledger-deletion-worker", {"brokerMarkKey.secretName": "ledger-deletion-mark-key"}),
    "no-secret": (
        "ledger-deletion-worker",
        {"secret.name": "", "autoscaling.keda.enabled": True, "monitoring.scrape": "", "monitoring.rules": ""},
    ),
    "reports-on-s3": ("ledger-deletion-worker", {"config.nightly.report_dir": "s3a://reports/ldw"}),
}


def _render(variant: str) -> Objects:
    release, sets = VARIANTS[variant]
    return {f"{d['kind']}/{d['metadata']['name']}": d for d in helm.template(CHART, release, sets=sets)}


@pytest.fixture(scope="module")
def rendered() -> dict[str, Objects]:
    return {v: _render(v) for v in VARIANTS}


@pytest.fixture(scope="module")
def objs(rendered: dict[str, Objects]) -> Objects:
    return rendered["default"]


def _one(objs: Objects, kind: str, suffix: str = "") -> dict[str, Any]:
    """The one object of ``kind`` whose name ends with ``suffix``."""
    found = [o for k, o in objs.items() if k.startswith(f"{kind}/") and k.endswith(suffix)]
    assert len(found) == 1, f"{kind}/*{suffix}: {sorted(objs)}"
    return found[0]


def _extra(found: dict[str, Any], allowed: set[str]) -> set[str]:
    return set(found) - allowed


def _pod(obj: dict[str, Any]) -> dict[str, Any]:
    if obj["kind"] == "CronJob":
        return dict(obj["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return dict(obj["spec"]["template"]["spec"])


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e for e in container.get("env", [])}


def _mount_of(pod: dict[str, Any], c: dict[str, Any], path: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The container's volume mount ``path`` lies under (the longest match) and its volume."""
    mounts = [
        m for m in c["volumeMounts"] if path == m["mountPath"] or path.startswith(m["mountPath"].rstrip("/") + "/")
    ]
    assert mounts, f"{path} is on no volume"
    mount = max(mounts, key=lambda m: len(m["mountPath"]))
    return mount, next(v for v in pod["volumes"] if v["name"] == mount["name"])


def _secret_file(pod: dict[str, Any], c: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) of the read-only secret file ``path`` in container ``c``."""
    mount, vol = _mount_of(pod, c, path)
    assert mount.get("readOnly") is True, path
    rel = path[len(mount["mountPath"].rstrip("/")) + 1 :]
    [item] = [i for i in vol["secret"]["items"] if i["path"] == rel]
    return vol["secret"]["secretName"], item["key"]


def _worker_config(objs: Objects) -> dict[str, Any]:
    cms = [o for k, o in objs.items() if k.startswith("ConfigMap/") and "worker.yaml" in o.get("data", {})]
    assert len(cms) == 1
    return dict(yaml.safe_load(cms[0]["data"]["worker.yaml"]))


def _load(config: dict[str, Any], tmp: Path) -> Settings:
    """The configuration as the pod's worker loads it at start: its own settings, with the token file the pod
    would have (a file with a token at a temporary path)."""
    config = json.loads(json.dumps(config))
    if config["pulsar"].get("auth_token_file"):
        token = tmp / "token"
        token.write_text("a-token")
        config["pulsar"]["auth_token_file"] = str(token)
    if config["worker"].get("broker_mark_key_file"):
        key = tmp / "mark-key"
        key.write_bytes(b"0123456789abcdef0123456789abcdef")
        config["worker"]["broker_mark_key_file"] = str(key)
    path = tmp / "worker.yaml"
    path.write_text(yaml.safe_dump(config))
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LDW_")}
    try:
        return load_settings(str(path))
    finally:
        os.environ.update(saved)


@pytest.fixture(scope="module")
def config(objs: Objects, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return _load(_worker_config(objs), tmp_path_factory.mktemp("cm"))


def _workloads(objs: Objects) -> list[dict[str, Any]]:
    return [o for o in objs.values() if o["kind"] in ("Deployment", "CronJob")]


# --- Helm itself -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_helm_lint_strict(variant: str) -> None:
    _, sets = VARIANTS[variant]
    args = ["lint", "--strict", str(CHART), "--kube-version", helm.KUBE_VERSION]
    for k, v in sets.items():
        args += ["--set-string" if isinstance(v, str) else "--set", f"{k}={v}"]
    r = helm.run(*args)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("config.worker.max_inflite=3", "additional properties 'max_inflite' not allowed"),
        ("config.worker.max_inflight=0", "/config/worker/max_inflight"),
        ("config.bookkeeper.delete_via=rest", "/config/bookkeeper/delete_via"),
        ("monitoring.scrape=Prometheus", "/monitoring/scrape"),
        ("replicas=2", "additional properties 'replicas' not allowed"),
    ],
)
def test_values_schema_refuses_what_the_settings_refuse(setting: str, message: str) -> None:
    """values.schema.json is the settings' own schema: Helm refuses the value before anything is applied, naming
    the key (the worker would refuse it at start)."""
    r = helm.run("template", "x", str(CHART), "--kube-version", helm.KUBE_VERSION, "--set", setting)
    assert r.returncode != 0 and message in r.stderr, r.stderr


def test_generated_files_are_current() -> None:
    """values.yaml's config block, values.schema.json and the Pulsar chart overlays are what tools/helm_chart.py
    writes from worker/settings.py (`make helm-chart`)."""
    values = (REPO / helm_chart.VALUES).read_text()
    stale = "is stale: run `make helm-chart`"
    assert helm_chart.render_values(values) == values, f"{helm_chart.VALUES} {stale}"
    assert (REPO / helm_chart.SCHEMA).read_text() == helm_chart.render_schema(), f"{helm_chart.SCHEMA} {stale}"
    for path, mark_key in ((helm_chart.OVERLAY, False), (helm_chart.OVERLAY_MARK_KEY, True)):
        assert (REPO / path).read_text() == helm_chart.render_overlay(values, mark_key=mark_key), f"{path} {stale}"


def test_values_carry_every_setting_with_its_default() -> None:
    """config: in values.yaml is the worker's whole configuration: every key of Settings, at its default except
    the in-cluster addresses."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(values["config"]) == set(Settings.model_fields)
    for section, keys in values["config"].items():
        assert set(keys) == set(type(getattr(Settings(), section)).model_fields), section
    saved = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("LDW_")}
    try:
        as_values, in_cluster = Settings(**values["config"]), Settings(**helm_chart.IN_CLUSTER)
    finally:
        os.environ.update(saved)
    assert as_values.model_dump(mode="json") == in_cluster.model_dump(mode="json")


def test_chart_version_is_the_workers() -> None:
    import worker

    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == chart["version"] == worker.__version__


# --- every manifest ----------------------------------------------------------------------------------------

CRD_KINDS = {"ScaledObject", "TriggerAuthentication", "ServiceMonitor", "PodMonitor", "VMPodScrape"}
CRD_KINDS |= {"PrometheusRule", "VMRule"}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_builtin_kinds_validate_strictly(rendered: dict[str, Objects], variant: str) -> None:
    for obj in rendered[variant].values():
        if obj["kind"] not in CRD_KINDS:
            helm.validate_builtin(obj)


def test_every_kind_is_rendered_and_checked(rendered: dict[str, Objects]) -> None:
    kinds = {o["kind"] for objs in rendered.values() for o in objs.values()}
    builtin = {"ConfigMap", "Deployment", "PodDisruptionBudget", "Service", "CronJob", "PersistentVolumeClaim"}
    assert kinds == builtin | CRD_KINDS


def test_default_install(objs: Objects) -> None:
    kinds = sorted(o["kind"] for o in objs.values())
    workloads = ["ConfigMap", "ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "CronJob", "CronJob"]
    assert kinds == sorted(
        [*workloads, "PersistentVolumeClaim", "PersistentVolumeClaim", "ServiceMonitor", "PrometheusRule"]
    ), "the default install: the worker, its nightly jobs, a ServiceMonitor and the alert rules"
    assert all(k.split("/")[1].startswith("ledger-deletion-worker") for k in objs), sorted(objs)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_names_and_labels(rendered: dict[str, Objects], variant: str) -> None:
    release, _ = VARIANTS[variant]
    for obj in rendered[variant].values():
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == WORKER_JOB
        assert labels["app.kubernetes.io/instance"] == release
        assert release in obj["metadata"]["name"]


# --- the workloads -----------------------------------------------------------------------------------------


def test_worker_config_loads(rendered: dict[str, Objects], tmp_path: Path) -> None:
    """Each variant's worker.yaml is a configuration the worker accepts (its own settings load it), with the
    in-cluster endpoints, and never a secret."""
    for variant, objs in rendered.items():
        cfg = _worker_config(objs)
        (tmp_path / variant).mkdir()
        s = _load(cfg, tmp_path / variant)
        assert s.http.host == "0.0.0.0", variant
        assert cfg["pulsar"].get("auth_token") is None, "the token belongs in the Secret, not the ConfigMap"
        assert all(t.secret_access_key is None and t.access_key_id is None for t in s.offload.s3_targets)
        assert (s.worker.broker_mark_key is not None) == (variant == "mark-key")


def test_deployment(objs: Objects, config: Settings) -> None:
    d = _one(objs, "Deployment")
    assert d["spec"]["replicas"] >= 2, "one replica evicted must leave another consuming"
    pod = _pod(d)
    assert pod["terminationGracePeriodSeconds"] > config.worker.drain_timeout_s + 5, "SIGKILL before the drain ends"
    assert pod["securityContext"]["runAsNonRoot"] is True
    [c] = pod["containers"]
    assert c["args"][0] == "run"
    port = c["ports"][0]
    assert port["containerPort"] == config.http.port
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["port"] == port["name"] == c["readinessProbe"]["httpGet"]["port"]
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    _check_secrets_and_config(objs, pod, c, config)
    assert d["spec"]["selector"]["matchLabels"].items() <= d["spec"]["template"]["metadata"]["labels"].items()


def test_drain_time_follows_the_setting() -> None:
    objs = helm.template(CHART, "x", sets={"config.worker.drain_timeout_s": 95})
    [d] = [o for o in objs if o["kind"] == "Deployment"]
    assert _pod(d)["terminationGracePeriodSeconds"] > 95 + 5


def _check_secrets_and_config(objs: Objects, pod: dict[str, Any], c: dict[str, Any], config: Settings) -> None:
    env = _env(c)
    for name, key in (("AWS_ACCESS_KEY_ID", "aws-access-key-id"), ("AWS_SECRET_ACCESS_KEY", "aws-secret-access-key")):
        ref = env[name]["valueFrom"]["secretKeyRef"]
        assert (ref["name"], ref["key"]) == (SECRET, key), name
    # The token as a file (config.pulsar.auth_token_file): read by every process that loads the settings, the
    # nightly jobs' Spark executors included, so it never travels in a Spark option or closure.
    assert not any(n.startswith("LDW_") for n in env), "the ConfigMap is the configuration"
    cfg = _worker_config(objs)
    assert _secret_file(pod, c, cfg["pulsar"]["auth_token_file"]) == (SECRET, "pulsar-token")
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert c["args"][c["args"].index("--config") + 1] == f"{mount['mountPath']}/worker.yaml"
    vol = next(v for v in pod["volumes"] if v["name"] == "config")
    assert f"ConfigMap/{vol['configMap']['name']}" in objs
    assert pod["securityContext"].get("fsGroup") is not None, "the non-root user must read the secret files"


def test_no_secret(rendered: dict[str, Objects]) -> None:
    """secret.name "": no credential from a Secret anywhere (a cluster without authentication; S3 keys from the
    pods' own credential chain), and KEDA reads the backlog without authentication."""
    objs = rendered["no-secret"]
    assert _worker_config(objs)["pulsar"]["auth_token_file"] is None
    for w in _workloads(objs):
        pod = _pod(w)
        assert not any("secret" in v for v in pod["volumes"]), w["metadata"]["name"]
        assert not any("valueFrom" in e for c in pod["containers"] for e in c.get("env", []))
    so = _one(objs, "ScaledObject")
    assert all("authenticationRef" not in t and "authModes" not in t["metadata"] for t in so["spec"]["triggers"])
    assert not any(o["kind"] == "TriggerAuthentication" for o in objs.values())


def test_broker_mark_key(rendered: dict[str, Objects]) -> None:
    """brokerMarkKey.secretName: the Secret's key mounted read-only on the worker and both nightly jobs, and
    named by worker.broker_mark_key_file; off by default."""
    objs = rendered["mark-key"]
    path = _worker_config(objs)["worker"]["broker_mark_key_file"]
    for w in _workloads(objs):
        pod = _pod(w)
        [c] = pod["containers"]
        assert _secret_file(pod, c, path) == ("ledger-deletion-mark-key", "mark-key"), w["metadata"]["name"]
    assert _worker_config(rendered["default"])["worker"]["broker_mark_key_file"] is None
    for w in _workloads(rendered["default"]):
        assert not any("mark" in v["name"] for v in _pod(w)["volumes"])


def test_pdb_and_service_select_the_worker_pods(objs: Objects) -> None:
    d = _one(objs, "Deployment")
    labels = d["spec"]["template"]["metadata"]["labels"]
    pdb = _one(objs, "PodDisruptionBudget")["spec"]
    assert pdb["selector"]["matchLabels"].items() <= labels.items()
    assert "minAvailable" not in pdb, "minAvailable with one replica would block every node drain"
    svc = _one(objs, "Service")
    assert svc["spec"]["selector"].items() <= labels.items()
    [c] = _pod(d)["containers"]
    assert svc["spec"]["ports"][0]["targetPort"] == c["ports"][0]["name"]
    for name in ("replay", "audit"):  # the nightly jobs push to the Pushgateway: nothing to scrape or protect there
        cj_labels = _pod_labels(_one(objs, "CronJob", name))
        assert not svc["spec"]["selector"].items() <= cj_labels.items()
        assert not pdb["selector"]["matchLabels"].items() <= cj_labels.items()


def _pod_labels(obj: dict[str, Any]) -> dict[str, str]:
    if obj["kind"] == "CronJob":
        return dict(obj["spec"]["jobTemplate"]["spec"]["template"]["metadata"]["labels"])
    return dict(obj["spec"]["template"]["metadata"]["labels"])


@pytest.mark.parametrize(("name", "command"), [("replay", "replay-dlq"), ("audit", "audit")])
def test_nightly_cronjobs(objs: Objects, config: Settings, name: str, command: str) -> None:
    cj = _one(objs, "CronJob", name)
    assert cj["spec"]["concurrencyPolicy"] == "Forbid"
    pod = _pod(cj)
    assert pod["restartPolicy"] == "Never" and pod["securityContext"]["runAsNonRoot"] is True
    [c] = pod["containers"]
    assert c["args"][0] == command
    assert "nightly" in c["image"], "the nightly image (Dockerfile target `nightly`) carries Spark and Java"
    assert config.nightly.pushgateway_url, "the nightly jobs push their results (alerts NightlyMissed/Failed)"
    # The report outlives the pod and the release: rows settled (acknowledged) on its strength must stay
    # traceable. A PersistentVolumeClaim of its own, kept on uninstall, never an emptyDir.
    _mount, vol = _mount_of(pod, c, config.nightly.report_dir)
    assert "emptyDir" not in vol, f"{config.nightly.report_dir} is on an emptyDir: the report dies with the pod"
    pvc = objs[f"PersistentVolumeClaim/{vol['persistentVolumeClaim']['claimName']}"]
    assert "ReadWriteOnce" in pvc["spec"]["accessModes"] and pvc["spec"]["resources"]["requests"]["storage"]
    assert pvc["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert pod["securityContext"].get("fsGroup") is not None, "the non-root job must be able to write the volume"
    _check_secrets_and_config(objs, pod, c, config)


def test_each_nightly_job_has_a_report_volume_of_its_own(objs: Objects) -> None:
    """Two jobs that may overlap (a replay running long into the audit's window) on ReadWriteOnce claims:
    one claim each, so neither waits for the other's node."""
    claims = []
    for name in ("replay", "audit"):
        pod = _pod(_one(objs, "CronJob", name))
        claims += [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert len(claims) == len(set(claims)) == 2


def test_reports_in_an_object_store_need_no_claim(rendered: dict[str, Objects]) -> None:
    objs = rendered["reports-on-s3"]
    assert not any(o["kind"] == "PersistentVolumeClaim" for o in objs.values())
    for name in ("replay", "audit"):
        assert not any("persistentVolumeClaim" in v for v in _pod(_one(objs, "CronJob", name))["volumes"])


def test_secret_keys_documented() -> None:
    docs = (REPO / "docs" / "operations.md").read_text()
    values = yaml.safe_load((CHART / "values.yaml").read_text())["secret"]
    assert {values["pulsarTokenKey"], values["awsAccessKeyIdKey"], values["awsSecretAccessKeyKey"]} == SECRET_KEYS
    for key in SECRET_KEYS:
        assert f"--from-literal={key}=" in docs, f"docs/operations.md: the install steps must create {key}"


# --- KEDA ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["keda-podmonitor", "no-secret"])
def test_keda_scaled_object_follows_the_worker_subscription(rendered: dict[str, Objects], variant: str) -> None:
    objs = rendered[variant]
    config = _worker_config(objs)
    so = _one(objs, "ScaledObject")
    assert so["apiVersion"] == "keda.sh/v1alpha1"
    spec = so["spec"]
    assert not _extra(spec, KEDA_SCALED_OBJECT_SPEC)
    assert not _extra(spec["scaleTargetRef"], KEDA_SCALE_TARGET_REF)
    target = _one(objs, "Deployment")
    assert (spec["scaleTargetRef"]["kind"], spec["scaleTargetRef"]["name"]) == (
        "Deployment",
        target["metadata"]["name"],
    )
    assert "replicas" not in target["spec"], "KEDA owns the replica count"
    assert 1 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    topics = {}
    for t in spec["triggers"]:
        assert not _extra(t, KEDA_TRIGGER) and t["type"] == "pulsar"
        md = t["metadata"]
        assert not _extra(md, KEDA_PULSAR_METADATA), md
        assert KEDA_PULSAR_REQUIRED <= set(md)
        assert all(isinstance(v, str) for v in md.values()), "KEDA trigger metadata values are strings"
        assert md["adminURL"] == str(config["pulsar"]["admin_url"]).rstrip("/")
        assert md["subscription"] == config["topics"]["subscription"]
        assert int(md["msgBacklogThreshold"]) > 0
        topics[md["topic"]] = md["isPartitionedTopic"]
        if "bearer" in md.get("authModes", ""):
            auth = objs[f"TriggerAuthentication/{t['authenticationRef']['name']}"]
            refs = auth["spec"]["secretTargetRef"]
            assert not _extra(auth["spec"], KEDA_TRIGGER_AUTH_SPEC)
            assert {r["parameter"] for r in refs} <= KEDA_PULSAR_AUTH_PARAMS
            assert {"bearerToken": (SECRET, "pulsar-token")} == {r["parameter"]: (r["name"], r["key"]) for r in refs}
    # Pending (partitioned by topics.parallelism) and retry: the worker subscription's whole backlog.
    assert topics == {config["topics"]["pending"]: "true", config["topics"]["retry"]: "false"}


# --- monitoring --------------------------------------------------------------------------------------------


def _scrape_job(objs: Objects, scrape: dict[str, Any]) -> str:
    """The job label the operator gives the scraped series: the value of the label named by jobLabel on the
    scraped object (the Service for a ServiceMonitor, the pods otherwise)."""
    if scrape["kind"] == "ServiceMonitor":
        labels = _one(objs, "Service")["metadata"]["labels"]
    else:
        labels = _pod_labels(_one(objs, "Deployment"))
    return str(labels[scrape["spec"]["jobLabel"]])


@pytest.mark.parametrize(
    ("variant", "kind"),
    [
        ("default", "ServiceMonitor"),
        ("renamed", "ServiceMonitor"),
        ("keda-podmonitor", "PodMonitor"),
        ("victoriametrics", "VMPodScrape"),
    ],
)
def test_scrape_object(rendered: dict[str, Objects], variant: str, kind: str) -> None:
    """Exactly one scrape object, selecting the worker pods (never the nightly jobs'), on their metrics port,
    yielding job="ledger-deletion-worker" whatever the release is called."""
    objs = rendered[variant]
    scrapes = [o for o in objs.values() if o["kind"] in ("ServiceMonitor", "PodMonitor", "VMPodScrape")]
    assert [s["kind"] for s in scrapes] == [kind], "one way to scrape: two would scrape every replica twice"
    scrape = scrapes[0]
    spec = scrape["spec"]
    if kind == "ServiceMonitor":
        assert scrape["apiVersion"] == "monitoring.coreos.com/v1"
        assert not _extra(spec, SERVICE_MONITOR_SPEC)
        svc = _one(objs, "Service")
        assert spec["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        [ep] = spec["endpoints"]
        assert not _extra(ep, SERVICE_MONITOR_ENDPOINT), ep
        assert ep["port"] in {p["name"] for p in svc["spec"]["ports"]}
    else:
        if kind == "PodMonitor":
            assert scrape["apiVersion"] == "monitoring.coreos.com/v1"
            assert not _extra(spec, POD_MONITOR_SPEC)
            assert scrape["metadata"]["labels"]["release"] == "kps"
        else:
            schema = json.loads(VM_POD_SCRAPE_SCHEMA.read_text())
            jsonschema.Draft7Validator.check_schema(schema)
            jsonschema.validate(scrape, schema)
        [ep] = spec["podMetricsEndpoints"]
        if kind == "PodMonitor":
            assert not _extra(ep, POD_MONITOR_ENDPOINT), ep
        pod_labels = _pod_labels(_one(objs, "Deployment"))
        assert spec["selector"]["matchLabels"].items() <= pod_labels.items(), "does not select the worker pods"
        for name in ("replay", "audit"):
            assert not spec["selector"]["matchLabels"].items() <= _pod_labels(_one(objs, "CronJob", name)).items()
        [c] = _pod(_one(objs, "Deployment"))["containers"]
        assert ep["port"] in {p["name"] for p in c["ports"]}
    assert "namespaceSelector" not in spec, "the worker pods live in the object's own namespace"
    assert ep.get("path", "/metrics") == "/metrics" and ep.get("scheme", "http") == "http"
    assert _scrape_job(objs, scrape) == WORKER_JOB
    assert f'job="{WORKER_JOB}"' in (REPO / dashboard.RULES).read_text()


def test_vm_pod_scrape_schema_rejects_what_the_crd_does(rendered: dict[str, Objects]) -> None:
    """The schema is strict where the CRD lists fields: Prometheus operator spellings (relabelings, the
    ServiceMonitor's endpoints) are not VMPodScrape fields, a podMetricsEndpoints list is required."""
    schema = json.loads(VM_POD_SCRAPE_SCHEMA.read_text())
    vps = _one(rendered["victoriametrics"], "VMPodScrape")
    bad_endpoint = json.loads(json.dumps(vps))
    bad_endpoint["spec"]["podMetricsEndpoints"][0]["relabelings"] = []
    no_endpoints = json.loads(json.dumps(vps))
    no_endpoints["spec"]["endpoints"] = no_endpoints["spec"].pop("podMetricsEndpoints")
    bad_scheme = json.loads(json.dumps(vps))
    bad_scheme["spec"]["podMetricsEndpoints"][0]["scheme"] = "tcp"
    for doc in (bad_endpoint, no_endpoints, bad_scheme):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(doc, schema)


@pytest.mark.parametrize(("variant", "kind"), [("default", "PrometheusRule"), ("victoriametrics", "VMRule")])
def test_alert_rules_are_the_rules_file(rendered: dict[str, Objects], variant: str, kind: str) -> None:
    """The rules file as it is (its Prometheus templates untouched by Helm's), as a PrometheusRule or a VMRule."""
    objs = rendered[variant]
    [rule] = [o for o in objs.values() if o["kind"] in ("PrometheusRule", "VMRule")]
    assert rule["kind"] == kind
    assert rule["spec"]["groups"] == yaml.safe_load((REPO / dashboard.RULES).read_text())["groups"]
    assert "{{ $labels.instance }}" in json.dumps(rule["spec"]), "Prometheus' templates must reach Prometheus"
    group_fields, rule_fields = (
        (PROMETHEUS_RULE_GROUP, PROMETHEUS_RULE) if kind == "PrometheusRule" else (VM_RULE_GROUP, VM_RULE)
    )
    for g in rule["spec"]["groups"]:
        assert not _extra(g, group_fields)
        for r in g["rules"]:
            assert not _extra(r, rule_fields), r
            assert ("alert" in r) != ("record" in r) and r["expr"]
    if kind == "VMRule":
        assert not any(o["apiVersion"].startswith("monitoring.coreos.com/") for o in objs.values())


def test_dashboard_for_grafanas_sidecar(objs: Objects) -> None:
    cm = _one(objs, "ConfigMap", "-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    [(name, text)] = cm["data"].items()
    assert name.endswith(".json") and text == (REPO / dashboard.OUT).read_text()
    assert len(text.encode()) < 1024 * 1024, "a ConfigMap holds at most 1 MiB"
