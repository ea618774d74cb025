"""The Helm chart ``deploy/helm/rwrouter``, rendered and linted by Helm's own engine (PyPI
``helm-python-sdk``: Helm v4's Go SDK, offline) and every manifest validated against the
Kubernetes schemas (PyPI ``kubernetes-validate``, strict), for a table of value scenarios.

Beyond the schemas: the ConfigMap's rwrouter.yaml passes ``rwrouter check-config``, the pod
template rolls when the configuration changes, the IRSA annotation, the restrictive security
context, the probes, the queue volume (emptyDir or a PersistentVolumeClaim) and the scaling
rules (several replicas or an HPA need ClientIP session affinity, else the chart fails).
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

helm = pytest.importorskip("helm_python", reason="pip install -e '.[test]' (helm-python-sdk)")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "rwrouter"
KUBE_VERSION = "1.33.0"  # a recent release bundled by kubernetes-validate (EKS supports it)
RELEASE = "rr"
NAMESPACE = "monitoring"
WORKSPACE = {"workspace": {"region": "eu-west-1", "id": "ws-0123456789"}}
CONFIG_ENV = {"AWS_REGION": "eu-west-1", "AMP_WORKSPACE_ID": "ws-0123456789"}
ROLE = "arn:aws:iam::123456789012:role/amp-remote-write"
CUSTOM_CONFIG = {
    "server": {"listen_address": "0.0.0.0:9250", "shutdown_timeout": "1m30s"},
    "storage": {"path": "data", "fsync": "always"},
    "remote_write": [{"name": "self-hosted", "url": "http://prometheus.monitoring:9090/api/v1/write"}],
}
PERSISTENT = {"persistence": {"enabled": True, "size": "10Gi", "storageClass": "gp3"}}
AFFINITY = {"service": {"sessionAffinity": "ClientIP"}}
HPA = {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6}}
EXTRAS = {"serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
          "podDisruptionBudget": {"enabled": True}}  # fmt: skip


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


# (id, values, the kinds rendered)
SCENARIOS: list[tuple[str, dict[str, Any], set[str]]] = [
    ("defaults", {}, {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
    ("defaults_with_workspace", WORKSPACE,
     {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
    ("persistence", merged(WORKSPACE, PERSISTENT),
     {"ConfigMap", "StatefulSet", "Service", "ServiceAccount"}),
    ("hpa_with_client_ip", merged(WORKSPACE, AFFINITY, HPA),
     {"ConfigMap", "Deployment", "Service", "ServiceAccount", "HorizontalPodAutoscaler"}),
    ("hpa_statefulset", merged(WORKSPACE, AFFINITY, HPA, PERSISTENT),
     {"ConfigMap", "StatefulSet", "Service", "ServiceAccount", "HorizontalPodAutoscaler"}),
    ("replicas_3_client_ip", merged(WORKSPACE, AFFINITY, {"replicaCount": 3}),
     {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
    ("servicemonitor_and_pdb", merged(WORKSPACE, EXTRAS),
     {"ConfigMap", "Deployment", "Service", "ServiceAccount", "ServiceMonitor",
      "PodDisruptionBudget"}),
    ("irsa_role", merged(WORKSPACE, {"serviceAccount": {"roleArn": ROLE}}),
     {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
    ("existing_service_account",
     merged(WORKSPACE, {"serviceAccount": {"create": False, "name": "amp-writer"}}),
     {"ConfigMap", "Deployment", "Service"}),
    ("custom_config", {"config": CUSTOM_CONFIG, "terminationGracePeriodSeconds": 120},
     {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
    ("config_as_string", {"config": yaml.safe_dump(CUSTOM_CONFIG),
                          "terminationGracePeriodSeconds": 91},
     {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
    ("workers_2", merged(WORKSPACE, {"workers": 2}),
     {"ConfigMap", "Deployment", "Service", "ServiceAccount"}),
]  # fmt: skip

# (id, values, a fragment of the error)
FAILING: list[tuple[str, dict[str, Any], str]] = [
    ("hpa_without_client_ip", HPA, "sessionAffinity: ClientIP"),
    ("replicas_2_without_client_ip", {"replicaCount": 2}, "sessionAffinity: ClientIP"),
    ("statefulset_replicas_without_client_ip", merged(PERSISTENT, {"replicaCount": 2}),
     "sessionAffinity: ClientIP"),
    ("bad_session_affinity", {"service": {"sessionAffinity": "Cookie"}}, "None or ClientIP"),
    ("grace_not_above_shutdown_timeout", {"terminationGracePeriodSeconds": 30},
     "must be larger than config.server.shutdown_timeout"),
    ("grace_below_custom_shutdown_timeout",
     {"config": CUSTOM_CONFIG, "terminationGracePeriodSeconds": 90},
     "must be larger than config.server.shutdown_timeout"),
    ("workers_0", {"workers": 0}, "workers must be null or an integer >= 1"),
]  # fmt: skip


@pytest.fixture(scope="module")
def chart() -> Iterator[Any]:
    with helm.Chart.load(CHART) as loaded:
        yield loaded


def render(chart: Any, values: dict[str, Any]) -> list[dict[str, Any]]:
    """Every rendered manifest (NOTES.txt excluded), as objects."""
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(out.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


def notes(chart: Any, values: dict[str, Any]) -> str:
    out = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    text: str = out["rwrouter/templates/NOTES.txt"]
    return text


def one(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs
             if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]  # fmt: skip
    assert len(found) == 1, f"{len(found)} {kind} {name or ''}"
    return found[0]


def workload(docs: list[dict[str, Any]]) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]
    assert len(found) == 1
    return found[0]


def container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers = workload(docs)["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["rwrouter"]
    result: dict[str, Any] = containers[0]
    return result


def config_text(docs: list[dict[str, Any]]) -> str:
    text: str = one(docs, "ConfigMap")["data"]["rwrouter.yaml"]
    return text


def checksum(docs: list[dict[str, Any]]) -> str:
    value: str = workload(docs)["spec"]["template"]["metadata"]["annotations"]["checksum/config"]
    return value


@pytest.mark.parametrize(("values", "kinds"), [(v, k) for _, v, k in SCENARIOS],
                         ids=[i for i, _, _ in SCENARIOS])  # fmt: skip
def test_chart_lints_clean(values: dict[str, Any], kinds: set[str]) -> None:
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE,
                       kube_version=f"v{KUBE_VERSION}")  # fmt: skip
    assert report["errors"] == []
    # Severity 1 is information (only "icon is recommended"); warnings and errors fail.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


@pytest.mark.parametrize(("values", "kinds"), [(v, k) for _, v, k in SCENARIOS],
                         ids=[i for i, _, _ in SCENARIOS])  # fmt: skip
def test_every_manifest_is_valid_kubernetes(chart: Any, values: dict[str, Any],
                                            kinds: set[str]) -> None:  # fmt: skip
    docs = render(chart, values)
    assert {d["kind"] for d in docs} == kinds
    for doc in docs:
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            continue  # a CRD: no bundled schema; its structure is asserted below
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{doc['kind']} {doc['metadata']['name']}: {exc}")
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == RELEASE


@pytest.mark.parametrize(("values", "kinds"), [(v, k) for _, v, k in SCENARIOS],
                         ids=[i for i, _, _ in SCENARIOS])  # fmt: skip
def test_pod_is_locked_down_and_probed(chart: Any, values: dict[str, Any],
                                       kinds: set[str]) -> None:  # fmt: skip
    docs = render(chart, values)
    pod = workload(docs)["spec"]["template"]["spec"]
    c = container(docs)
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == pod["securityContext"]["runAsGroup"] == 10001
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["automountServiceAccountToken"] is False
    sc = c["securityContext"]
    assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 10001 and sc["runAsGroup"] == 10001
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/-/healthy", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/-/ready", "port": "http"}
    assert c["ports"] == [{"name": "http", "containerPort": 9250, "protocol": "TCP"}]
    assert c["image"] == "rwrouter:0.3.0"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    assert mounts == {"/etc/rwrouter": "config", "/var/lib/rwrouter": "data"}
    assert {"name": "config", "configMap": {"name": f"{RELEASE}-rwrouter"}} in pod["volumes"]
    service = one(docs, "Service", f"{RELEASE}-rwrouter")
    assert service["spec"]["ports"] == [{"name": "http", "port": 9250, "targetPort": "http",
                                         "protocol": "TCP"}]  # fmt: skip
    assert service["spec"]["selector"] == workload(docs)["spec"]["selector"]["matchLabels"]


def test_deployment_queue_is_an_empty_dir(chart: Any) -> None:
    docs = render(chart, WORKSPACE)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {"sizeLimit": "4Gi"}}
    assert not any(d["kind"] in ("StatefulSet", "PersistentVolumeClaim") for d in docs)


def test_statefulset_queue_is_a_claim_per_pod(chart: Any) -> None:
    docs = render(chart, merged(WORKSPACE, PERSISTENT))
    sts = one(docs, "StatefulSet")
    claims = sts["spec"]["volumeClaimTemplates"]
    assert [c["metadata"]["name"] for c in claims] == ["data"]
    assert claims[0]["spec"]["resources"]["requests"]["storage"] == "10Gi"
    assert claims[0]["spec"]["storageClassName"] == "gp3"
    assert claims[0]["spec"]["accessModes"] == ["ReadWriteOnce"]
    pod = sts["spec"]["template"]["spec"]
    assert "data" not in {v["name"] for v in pod["volumes"]}  # the claim, not an emptyDir
    mounts = {m["name"]: m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["data"] == "/var/lib/rwrouter"
    headless = one(docs, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert not any(d["kind"] == "Deployment" for d in docs)


def test_config_change_rolls_the_pods(chart: Any) -> None:
    base = checksum(render(chart, WORKSPACE))
    assert base == checksum(render(chart, WORKSPACE)), "the checksum must be deterministic"
    # Values outside the configuration do not roll the pods...
    assert base == checksum(render(chart, merged(WORKSPACE, {"replicaCount": 1,
                                                              "podLabels": {"a": "b"}})))
    # ...a change of the configuration does, for the Deployment and the StatefulSet alike.
    changed = merged(WORKSPACE, {"config": {"server": {"shutdown_timeout": "20s"}}})
    assert base != checksum(render(chart, changed))
    persistent = checksum(render(chart, merged(WORKSPACE, PERSISTENT)))
    assert persistent != checksum(render(chart, merged(changed, PERSISTENT)))


@pytest.mark.parametrize(("values", "kinds"), [(v, k) for _, v, k in SCENARIOS],
                         ids=[i for i, _, _ in SCENARIOS])  # fmt: skip
def test_configmap_passes_check_config(chart: Any, values: dict[str, Any], kinds: set[str],
                                       tmp_path: Path) -> None:  # fmt: skip
    docs = render(chart, values)
    path = tmp_path / "rwrouter.yaml"
    path.write_text(config_text(docs))
    # The container's environment: what the chart sets, or the variables the config needs.
    env = {**os.environ, **CONFIG_ENV}
    for var in container(docs).get("env") or []:
        env[var["name"]] = var["value"]
    result = subprocess.run(
        [sys.executable, "-m", "rwrouter", "check-config", str(path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    parsed = yaml.safe_load(config_text(docs))
    assert parsed["server"]["listen_address"].endswith(":9250")
    grace = workload(docs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > 30


def test_default_config_targets_workspace_and_fallback(chart: Any) -> None:
    docs = render(chart, WORKSPACE)
    parsed = yaml.safe_load(config_text(docs))
    workspace, fallback = parsed["remote_write"]
    assert workspace["sigv4"] == {"region": "${AWS_REGION}"}
    assert "${AMP_WORKSPACE_ID}" in workspace["url"]
    assert fallback["fallback"] is True
    assert parsed["storage"]["path"] == "data"  # relative to the working dir: the volume
    env = {e["name"]: e["value"] for e in container(docs)["env"]}
    assert env == CONFIG_ENV


def test_custom_config_is_rendered_verbatim(chart: Any) -> None:
    # A string is taken verbatim (e.g. --set-file config=my-rwrouter.yaml)...
    docs = render(chart, {"config": yaml.safe_dump(CUSTOM_CONFIG),
                          "terminationGracePeriodSeconds": 120})  # fmt: skip
    assert yaml.safe_load(config_text(docs)) == CUSTOM_CONFIG
    # ...a map is merged by Helm into the default map (lists such as remote_write replace the
    # default's; keys not given keep the default's: relabel_configs [] here).
    docs = render(chart, {"config": CUSTOM_CONFIG, "terminationGracePeriodSeconds": 120})
    assert yaml.safe_load(config_text(docs)) == {**CUSTOM_CONFIG, "relabel_configs": []}
    docs = render(chart, {"config": {**CUSTOM_CONFIG, "relabel_configs": None},
                          "terminationGracePeriodSeconds": 120})  # fmt: skip
    assert yaml.safe_load(config_text(docs)) == CUSTOM_CONFIG


def test_irsa_role_annotates_the_service_account(chart: Any) -> None:
    docs = render(chart, merged(WORKSPACE, {"serviceAccount": {"roleArn": ROLE}}))
    sa = one(docs, "ServiceAccount")
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": ROLE}
    pod = workload(docs)["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"]
    assert "annotations" not in one(render(chart, WORKSPACE), "ServiceAccount")["metadata"]


def test_existing_service_account_is_used(chart: Any) -> None:
    docs = render(chart, {"serviceAccount": {"create": False, "name": "amp-writer"}})
    assert not any(d["kind"] == "ServiceAccount" for d in docs)
    assert workload(docs)["spec"]["template"]["spec"]["serviceAccountName"] == "amp-writer"


@pytest.mark.parametrize(("values", "args"), [
    ({}, None),
    ({"workers": 2}, ["--workers", "2"]),
    ({"workers": 1}, ["--workers", "1"]),
], ids=["unset", "two", "one"])  # fmt: skip
def test_workers_become_container_args(chart: Any, values: dict[str, Any],
                                       args: list[str] | None) -> None:  # fmt: skip
    assert container(render(chart, values)).get("args") == args


@pytest.mark.parametrize("persistent", [False, True], ids=["deployment", "statefulset"])
def test_hpa_scales_the_workload_behind_client_ip_affinity(chart: Any, persistent: bool) -> None:
    values = merged(WORKSPACE, AFFINITY, HPA, PERSISTENT if persistent else {})
    docs = render(chart, values)
    hpa = one(docs, "HorizontalPodAutoscaler")
    target = workload(docs)
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": target["kind"],
                                             "name": target["metadata"]["name"]}  # fmt: skip
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 6)
    metric = hpa["spec"]["metrics"][0]["resource"]
    assert metric == {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}}
    assert "replicas" not in target["spec"]  # the HPA owns it
    service = one(docs, "Service", f"{RELEASE}-rwrouter")["spec"]
    assert service["sessionAffinity"] == "ClientIP"
    assert service["sessionAffinityConfig"] == {"clientIP": {"timeoutSeconds": 10800}}


def test_servicemonitor_and_pdb(chart: Any) -> None:
    docs = render(chart, merged(WORKSPACE, EXTRAS, PERSISTENT))
    monitor = one(docs, "ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["endpoints"] == [{"port": "http", "path": "/metrics", "interval": "30s"}]
    selector = monitor["spec"]["selector"]
    main = one(docs, "Service", f"{RELEASE}-rwrouter")
    headless = one(docs, "Service", f"{RELEASE}-rwrouter-headless")

    def selects(service: dict[str, Any]) -> bool:
        labels = service["metadata"]["labels"]
        if any(labels.get(k) != v for k, v in selector["matchLabels"].items()):
            return False
        return all(labels.get(e["key"]) not in e["values"] for e in selector["matchExpressions"])

    assert selects(main) and not selects(headless), "each pod scraped once"
    pdb = one(docs, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1 and "minAvailable" not in pdb["spec"]
    assert pdb["spec"]["selector"] == workload(docs)["spec"]["selector"]
    pdb = one(render(chart, {"podDisruptionBudget": {"enabled": True, "minAvailable": 1}}),
              "PodDisruptionBudget")  # fmt: skip
    assert pdb["spec"] == {"minAvailable": 1, "selector": pdb["spec"]["selector"]}


def test_optional_objects_are_off_by_default(chart: Any) -> None:
    kinds = {d["kind"] for d in render(chart, {})}
    assert not kinds & {"HorizontalPodAutoscaler", "PodDisruptionBudget", "ServiceMonitor",
                        "StatefulSet"}  # fmt: skip
    service = one(render(chart, {}), "Service")["spec"]
    assert service["sessionAffinity"] == "None" and "sessionAffinityConfig" not in service


@pytest.mark.parametrize(("values", "message"), [(v, m) for _, v, m in FAILING],
                         ids=[i for i, _, _ in FAILING])  # fmt: skip
def test_unsafe_values_are_refused(chart: Any, values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm.HelmError) as raised:
        chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    assert message in str(raised.value)
    # Not asserted through helm.lint: Helm lints in its "lint mode", where `fail` only logs
    # (like `required`), so a render (install, upgrade, template) is what refuses these values.


def test_notes_warn_about_what_is_missing(chart: Any) -> None:
    text = notes(chart, {})
    assert "workspace.id is not set" in text and "workspace.region is not set" in text
    assert "serviceAccount.roleArn is empty" in text and "emptyDir" in text
    text = notes(chart, merged(WORKSPACE, PERSISTENT, AFFINITY, HPA,
                               {"serviceAccount": {"roleArn": ROLE}, "workers": 2}))  # fmt: skip
    assert "WARNING" not in text and "roleArn is empty" not in text
    assert "sessionAffinity ClientIP" in text and "--workers 2" in text
    assert f"http://{RELEASE}-rwrouter.{NAMESPACE}.svc:9250/api/v1/write" in text


# Values that are Kubernetes objects or the rwrouter configuration: documented as a whole.
WHOLE = {"config", "resources", "podSecurityContext", "securityContext"}


def _documented_keys(values: Any, prefix: str = "") -> set[str]:
    keys: set[str] = set()
    if isinstance(values, dict):
        for key, value in values.items():
            path = f"{prefix}.{key}" if prefix else key
            if isinstance(value, dict) and value and path not in WHOLE:
                keys |= _documented_keys(value, path)
            else:
                keys.add(path)
    return keys


def test_every_value_is_documented_in_the_readme() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    readme = (CHART / "README.md").read_text()
    missing = sorted(k for k in _documented_keys(values) if f"| `{k}` |" not in readme)
    assert missing == []
    chart_yaml = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert (chart_yaml["apiVersion"], chart_yaml["version"], chart_yaml["appVersion"]) == (
        "v2", "0.1.0", "0.3.0")
