"""The Helm chart ``deploy/helm/rwrouter``, rendered and linted by Helm's own engine (PyPI
``helm-python-sdk``: Helm v4's Go SDK, offline) and every manifest validated against the
Kubernetes schemas (PyPI ``kubernetes-validate``, strict), for a table of value scenarios.

Beyond the schemas: the ConfigMap's rwrouter.yaml passes ``rwrouter check-config``, the pod
template rolls when the configuration changes, the IRSA annotation, the restrictive security
context, the probes, the queue volume (emptyDir or a PersistentVolumeClaim), the scaling
rules (several replicas or an HPA need ClientIP session affinity, else the chart fails) and the
sizing estimate (disk and memory, the audit's series and shadow destinations included).
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

import rwrouter
from rwrouter.config.values import parse_size
from rwrouter.pipeline.budgets import table_bytes
from rwrouter.pipeline.ha import MAX_CLUSTERS as ELECTION_SLOTS
from rwrouter.pipeline.ha import SLOT as ELECTION_SLOT
from rwrouter.server.runner import REQUEST_GRACE
from rwrouter.server.supervisor import KILL_GRACE

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
    "remote_write": [
        {"name": "self-hosted", "url": "http://prometheus.monitoring:9090/api/v1/write"}
    ],
}
PERSISTENT = {"persistence": {"enabled": True, "size": "10Gi", "storageClass": "gp3"}}
AFFINITY = {"service": {"sessionAffinity": "ClientIP"}}
HPA = {"autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 6}}
EXTRAS = {
    "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
    "podDisruptionBudget": {"enabled": True},
}
DEFAULT_DESTINATIONS = yaml.safe_load((CHART / "values.yaml").read_text())["config"]["remote_write"]
# A shadow candidate: a copy of the workspace destination (its queue_config left in place, unused)
# keeping every DCGM family: counted by the audit, never queued or sent.
CANDIDATE = {
    **{k: v for k, v in DEFAULT_DESTINATIONS[0].items() if k != "audit"},
    "name": "workspace-all-dcgm",
    "shadow": True,
    "write_relabel_configs": [
        {"source_labels": ["__name__"], "regex": "DCGM_.*", "action": "keep"}
    ],
}
SHADOW = {"config": {"remote_write": [*DEFAULT_DESTINATIONS, CANDIDATE]}}


def merged(*parts: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for part in parts:
        for key, value in part.items():
            if isinstance(value, dict) and isinstance(out.get(key), dict):
                out[key] = merged(out[key], value)
            else:
                out[key] = copy.deepcopy(value)
    return out


# The web configuration file (rwrouter run --web.config.file): TLS from a mounted Secret and
# a bcrypt-hashed user with the write role.
WEB_TLS = {
    "webConfig": {
        "config": {
            "tls_server_config": {
                "cert_file": "/etc/rwrouter-web/tls/tls.crt",
                "key_file": "/etc/rwrouter-web/tls/tls.key",
            },
            "basic_auth_users": {
                "prometheus": "$2b$12$hNf2lSsxfm0.i4a.1kVpSOVyBCfIB51VRjgBUyv6kdnyTlgWj81Ay"
            },
        },
        "secretMounts": [{"name": "tls", "secretName": "rwrouter-tls"}],
    }
}
# The same from an existing Secret, with client certificates required: the chart cannot read
# it, so the scheme and the probe kind are given.
WEB_EXISTING = {
    "webConfig": {
        "existingSecret": "rwrouter-web",
        "secretMounts": [{"name": "tls", "secretName": "rwrouter-tls"}],
        "scheme": "HTTPS",
        "probe": "tcpSocket",
    }
}


# (id, values, the kinds rendered)
SCENARIOS: list[tuple[str, dict[str, Any], set[str]]] = [
    ("defaults", {}, {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"}),
    (
        "defaults_with_workspace",
        WORKSPACE,
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "persistence",
        merged(WORKSPACE, PERSISTENT),
        {"ConfigMap", "NetworkPolicy", "StatefulSet", "Service", "ServiceAccount"},
    ),
    (
        "hpa_with_client_ip",
        merged(WORKSPACE, AFFINITY, HPA),
        {
            "ConfigMap",
            "NetworkPolicy",
            "Deployment",
            "Service",
            "ServiceAccount",
            "HorizontalPodAutoscaler",
        },
    ),
    (
        "hpa_statefulset",
        merged(WORKSPACE, AFFINITY, HPA, PERSISTENT),
        {
            "ConfigMap",
            "NetworkPolicy",
            "StatefulSet",
            "Service",
            "ServiceAccount",
            "HorizontalPodAutoscaler",
        },
    ),
    (
        "replicas_3_client_ip",
        merged(WORKSPACE, AFFINITY, {"replicaCount": 3}),
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "servicemonitor_and_pdb",
        merged(WORKSPACE, EXTRAS),
        {
            "ConfigMap",
            "NetworkPolicy",
            "Deployment",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
            "PodDisruptionBudget",
        },
    ),
    (
        "irsa_role",
        merged(WORKSPACE, {"serviceAccount": {"roleArn": ROLE}}),
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "existing_service_account",
        merged(WORKSPACE, {"serviceAccount": {"create": False, "name": "amp-writer"}}),
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service"},
    ),
    (
        "custom_config",
        {"config": CUSTOM_CONFIG, "terminationGracePeriodSeconds": 120},
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "config_as_string",
        {"config": yaml.safe_dump(CUSTOM_CONFIG), "terminationGracePeriodSeconds": 91},
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "workers_2",
        merged(WORKSPACE, {"workers": 2}),
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "workers_2_statefulset",
        merged(WORKSPACE, AFFINITY, PERSISTENT, {"workers": 2, "replicaCount": 2}),
        {"ConfigMap", "NetworkPolicy", "StatefulSet", "Service", "ServiceAccount"},
    ),
    (
        "listen_on_ipv6_port_8080",
        {"config": {"server": {"listen_address": "[::]:8080"}}},
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "storage_under_the_volume",
        {
            "config": {"storage": {"path": "/var/lib/rwrouter/queues"}},
            "emptyDir": {"sizeLimit": "3Gi"},
        },
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "shadow_candidate",
        merged(WORKSPACE, SHADOW),
        {"ConfigMap", "NetworkPolicy", "Deployment", "Service", "ServiceAccount"},
    ),
    (
        "shadow_candidate_statefulset",
        merged(WORKSPACE, SHADOW, PERSISTENT),
        {"ConfigMap", "NetworkPolicy", "StatefulSet", "Service", "ServiceAccount"},
    ),
    (
        "web_config_tls_and_users",
        merged(WORKSPACE, WEB_TLS),
        {"ConfigMap", "NetworkPolicy", "Deployment", "Secret", "Service", "ServiceAccount"},
    ),
    (
        "web_config_mtls_existing_secret",
        merged(WORKSPACE, WEB_EXISTING, EXTRAS),
        {
            "ConfigMap",
            "NetworkPolicy",
            "Deployment",
            "Service",
            "ServiceAccount",
            "ServiceMonitor",
            "PodDisruptionBudget",
        },
    ),
    (
        "no_network_policy_lifecycle_on",
        merged(WORKSPACE, {"networkPolicy": {"enabled": False}, "lifecycle": True}),
        {"ConfigMap", "Deployment", "Service", "ServiceAccount"},
    ),
]

HA_DESTINATION = {
    "name": "workspace",
    "url": "http://prometheus:9090/api/v1/write",
    "ha_dedup": {"failover_timeout": "30s"},
}

# (id, values, a fragment of the error)
FAILING: list[tuple[str, dict[str, Any], str]] = [
    ("hpa_without_client_ip", HPA, "sessionAffinity: ClientIP"),
    ("replicas_2_without_client_ip", {"replicaCount": 2}, "sessionAffinity: ClientIP"),
    (
        "statefulset_replicas_without_client_ip",
        merged(PERSISTENT, {"replicaCount": 2}),
        "sessionAffinity: ClientIP",
    ),
    ("bad_session_affinity", {"service": {"sessionAffinity": "Cookie"}}, "None or ClientIP"),
    (
        "ha_dedup_with_replicas",
        merged(AFFINITY, {"replicaCount": 2, "config": {"remote_write": [HA_DESTINATION]}}),
        "has ha_dedup: it needs replicaCount 1",
    ),
    (
        "ha_dedup_defaults_with_replicas_without_client_ip",
        {"replicaCount": 2, "config": {"remote_write": [{**HA_DESTINATION, "ha_dedup": {}}]}},
        "has ha_dedup: it needs replicaCount 1",
    ),
    (
        "ha_dedup_with_hpa",
        merged(HPA, AFFINITY, {"config": {"remote_write": [HA_DESTINATION]}}),
        "has ha_dedup: it needs replicaCount 1",
    ),
    (
        "grace_not_above_shutdown_timeout",
        {"terminationGracePeriodSeconds": 30},
        "must be larger than config.server.shutdown_timeout",
    ),
    (
        "grace_below_custom_shutdown_timeout",
        {"config": CUSTOM_CONFIG, "terminationGracePeriodSeconds": 90},
        "must be larger than config.server.shutdown_timeout",
    ),
    ("workers_0", {"workers": 0}, "workers must be null or an integer >= 1"),
    ("workers_fraction", {"workers": 1.5}, "workers must be null or an integer >= 1, got 1.5"),
    ("workers_string", {"workers": "2"}, "workers must be null or an integer >= 1"),
    ("workers_bool", {"workers": True}, "workers must be null or an integer >= 1"),
    (
        "listen_on_loopback",
        {"config": {"server": {"listen_address": "127.0.0.1:9250"}}},
        "config.server.listen_address must listen on all interfaces",
    ),
    (
        "listen_on_a_pod_name",
        {"config": {"server": {"listen_address": "rwrouter:9250"}}},
        "config.server.listen_address must listen on all interfaces",
    ),
    (
        "listen_on_any_port",
        {"config": {"server": {"listen_address": "0.0.0.0:0"}}},
        "config.server.listen_address must have a fixed port 1..65535",
    ),
    (
        "storage_path_absolute",
        {"config": {"storage": {"path": "/data"}}},
        "config.storage.path must be on the queue volume",
    ),
    (
        "storage_path_beside_volume",
        {"config": {"storage": {"path": "/var/lib/rwrouter-old"}}},
        "config.storage.path must be on the queue volume",
    ),
    (
        "storage_path_escapes",
        {"config": {"storage": {"path": "../data"}}},
        "config.storage.path must be on the queue volume",
    ),
    (
        "storage_path_escapes_volume",
        {"config": {"storage": {"path": "/var/lib/rwrouter/../x"}}},
        "config.storage.path must be on the queue volume",
    ),
    (
        "grace_without_supervisor_kill_grace",
        {"workers": 2, "terminationGracePeriodSeconds": 45},
        "must be larger than config.server.shutdown_timeout (30000ms) + 15s with workers > 1",
    ),
    (
        "grace_custom_timeout_workers",
        {"config": CUSTOM_CONFIG, "workers": 3, "terminationGracePeriodSeconds": 100},
        "must be larger than config.server.shutdown_timeout (90000ms) + 15s with workers > 1",
    ),
    (
        "empty_dir_too_small_for_workers",
        {"workers": 2, "emptyDir": {"sizeLimit": "4Gi"}},
        "emptyDir.sizeLimit (4Gi) is smaller than the queues may use: 4354Mi = workers (2)",
    ),
    (
        "empty_dir_too_small_for_bounds",
        {"config": {"storage": {"rejected_max_bytes": "1GiB"}}, "emptyDir": {"sizeLimit": "4G"}},
        "emptyDir.sizeLimit (4G) is smaller than the queues may use: 4096Mi = workers (1)",
    ),
    (
        "claim_too_small_for_workers",
        merged(PERSISTENT, {"workers": 2, "persistence": {"size": "4Gi"}}),
        "persistence.size (4Gi) is smaller than the queues may use: 4354Mi = workers (2)",
    ),
    (
        "claim_too_small_for_bounds",
        merged(
            PERSISTENT,
            {
                "config": {
                    "remote_write": [
                        {
                            "name": "big",
                            "url": "http://p:9090/api/v1/write",
                            "queue_config": {"max_disk_bytes": 10737418240},
                        }
                    ]
                }
            },
        ),
        "persistence.size (10Gi) is smaller than the queues may use: 10304Mi = workers (1)",
    ),
    (
        "bad_size_in_config",
        {"config": {"relabel_cache": {"max_bytes": "256mb"}}},
        'config.relabel_cache.max_bytes: expected a size such as 1GiB or 512MiB, got "256mb"',
    ),
    (
        "audit_max_series_as_a_string",
        {"config": {"audit": {"max_series": "500k"}}},
        "config.audit.max_series: expected an integer such as 500000, got 500k (string)",
    ),
    (
        "web_config_inline_and_existing",
        merged(WEB_TLS, {"webConfig": {"existingSecret": "x"}}),
        "webConfig.config and webConfig.existingSecret exclude each other",
    ),
    (
        "web_config_not_a_map",
        {"webConfig": {"config": "tls: yes"}},
        "webConfig.config must be a map",
    ),
    ("web_scheme_lowercase", {"webConfig": {"scheme": "https"}}, "webConfig.scheme must be auto"),
    ("web_probe_exec", {"webConfig": {"probe": "exec"}}, "webConfig.probe must be auto"),
    (
        "web_mount_named_config",
        merged(WEB_TLS, {"webConfig": {"secretMounts": [{"name": "config", "secretName": "s"}]}}),
        "webConfig.secretMounts: each needs a name",
    ),
    (
        "web_mounts_without_web_config",
        {"webConfig": {"secretMounts": [{"name": "tls", "secretName": "s"}]}},
        "webConfig.secretMounts without webConfig.config",
    ),
    (
        "shadow_does_not_lift_the_volume_check",
        merged(SHADOW, {"emptyDir": {"sizeLimit": "2175Mi"}}),
        "emptyDir.sizeLimit (2175Mi) is smaller than the queues may use: 2176Mi = workers (1)",
    ),
]


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
    found = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
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


@pytest.mark.parametrize(
    ("values", "kinds"), [(v, k) for _, v, k in SCENARIOS], ids=[i for i, _, _ in SCENARIOS]
)
def test_chart_lints_clean(values: dict[str, Any], kinds: set[str]) -> None:
    report = helm.lint(
        CHART, values, strict=True, namespace=NAMESPACE, kube_version=f"v{KUBE_VERSION}"
    )
    assert report["errors"] == []
    # Severity 1 is information (only "icon is recommended"); warnings and errors fail.
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == []


@pytest.mark.parametrize(
    ("values", "kinds"), [(v, k) for _, v, k in SCENARIOS], ids=[i for i, _, _ in SCENARIOS]
)
def test_every_manifest_is_valid_kubernetes(
    chart: Any, values: dict[str, Any], kinds: set[str]
) -> None:
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


@pytest.mark.parametrize(
    ("values", "kinds"), [(v, k) for _, v, k in SCENARIOS], ids=[i for i, _, _ in SCENARIOS]
)
def test_pod_is_locked_down_and_probed(chart: Any, values: dict[str, Any], kinds: set[str]) -> None:
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
    web = values.get("webConfig", {})
    if web.get("probe") == "tcpSocket":
        assert (
            c["livenessProbe"]["tcpSocket"] == c["readinessProbe"]["tcpSocket"] == {"port": "http"}
        )
    else:
        scheme = "HTTPS" if "tls_server_config" in (web.get("config") or {}) else "HTTP"
        health = {"path": "/-/healthy", "port": "http", "scheme": scheme}
        assert c["livenessProbe"]["httpGet"] == health
        assert c["readinessProbe"]["httpGet"] == {**health, "path": "/-/ready"}
    listen = yaml.safe_load(config_text(docs))["server"]["listen_address"]
    port = int(listen.rpartition(":")[2])
    assert c["ports"] == [{"name": "http", "containerPort": port, "protocol": "TCP"}]
    assert c["image"] == f"rwrouter:{rwrouter.__version__}"
    assert c["resources"]["requests"]["cpu"] and c["resources"]["limits"]["memory"]
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    expected = {"/etc/rwrouter": "config", "/var/lib/rwrouter": "data"}
    if web.get("config") or web.get("existingSecret"):
        expected["/etc/rwrouter-web/config"] = "web-config"
    expected |= {
        f"/etc/rwrouter-web/{m['name']}": f"web-{m['name']}" for m in web.get("secretMounts", [])
    }
    assert mounts == expected
    assert all(m.get("readOnly") for m in c["volumeMounts"] if m["name"] != "data")
    assert {"name": "config", "configMap": {"name": f"{RELEASE}-rwrouter"}} in pod["volumes"]
    service = one(docs, "Service", f"{RELEASE}-rwrouter")
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 9250, "targetPort": "http", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"] == workload(docs)["spec"]["selector"]["matchLabels"]


def test_deployment_queue_is_an_empty_dir(chart: Any) -> None:
    docs = render(chart, WORKSPACE)
    deployment = one(docs, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"] == {"name": "data", "emptyDir": {"sizeLimit": "2784Mi"}}
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
    assert base == checksum(
        render(chart, merged(WORKSPACE, {"replicaCount": 1, "podLabels": {"a": "b"}}))
    )
    # ...a change of the configuration does, for the Deployment and the StatefulSet alike.
    changed = merged(WORKSPACE, {"config": {"server": {"shutdown_timeout": "20s"}}})
    assert base != checksum(render(chart, changed))
    persistent = checksum(render(chart, merged(WORKSPACE, PERSISTENT)))
    assert persistent != checksum(render(chart, merged(changed, PERSISTENT)))


@pytest.mark.parametrize(
    ("values", "kinds"), [(v, k) for _, v, k in SCENARIOS], ids=[i for i, _, _ in SCENARIOS]
)
def test_configmap_passes_check_config(
    chart: Any, values: dict[str, Any], kinds: set[str], tmp_path: Path
) -> None:
    docs = render(chart, values)
    path = tmp_path / "rwrouter.yaml"
    path.write_text(config_text(docs))
    # The container's environment: what the chart sets, or the variables the config needs.
    env = {**os.environ, **CONFIG_ENV}
    for var in container(docs).get("env") or []:
        env[var["name"]] = var["value"]
    result = subprocess.run(
        [sys.executable, "-m", "rwrouter", "check-config", str(path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    parsed = yaml.safe_load(config_text(docs))
    # rwrouter sees the destinations audited and shadowed as the chart's estimate counts them.
    dests = parsed["remote_write"]
    assert result.stdout.count("\n  audit: yes") == sum(bool(d.get("audit")) for d in dests)
    assert result.stdout.count("\n  shadow: yes") == sum(bool(d.get("shadow")) for d in dests)
    port = container(docs)["ports"][0]["containerPort"]
    assert parsed["server"]["listen_address"].endswith(f":{port}")
    grace = workload(docs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > 30


def test_default_config_targets_workspace_and_fallback(chart: Any) -> None:
    docs = render(chart, WORKSPACE)
    parsed = yaml.safe_load(config_text(docs))
    workspace, fallback = parsed["remote_write"]
    assert workspace["sigv4"] == {"region": "${AWS_REGION}"}
    assert "${AMP_WORKSPACE_ID}" in workspace["url"]
    # The workspace is audited (sent and counted: the alert RwrouterAuditedSeriesNearLimit, the
    # dashboard's Audit row, `rwrouter audit`); the fallback is not.
    assert workspace["audit"] is True and "shadow" not in workspace
    assert fallback["fallback"] is True and "audit" not in fallback
    assert parsed["audit"] == {"max_series": 500_000}
    assert parsed["storage"]["path"] == "data"  # relative to the working dir: the volume
    env = {e["name"]: e["value"] for e in container(docs)["env"]}
    assert env == CONFIG_ENV


MIB = 1024 * 1024
BASE_MEMORY = 150 * MIB  # the chart's per-process base in its memory estimate
SERIES_BYTES = 100  # the chart's bytes per series an audit remembers (bench measured 83)
DEFAULT_MAX_SERIES = 2_000_000  # rwrouter's audit.max_series


def quantity(text: str) -> int:
    """Bytes of a Kubernetes quantity with a binary suffix (as the chart's defaults use)."""
    units = {"Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}
    return int(text[:-2]) * units[text[-2:]]


def shared_tables(config: dict[str, Any], workers: int) -> int:
    """Bytes of the files the workers share on the queue volume (none for one process): the
    HA election table and each budgeted destination's series table, as rwrouter sizes them."""
    if workers == 1:
        return 0
    limits = [d["series_limit"] for d in config["remote_write"] if d.get("series_limit")]
    return ELECTION_SLOTS * ELECTION_SLOT.size + sum(map(table_bytes, limits))


def bounds(config: dict[str, Any], workers: int = 1) -> tuple[int, int]:
    """(disk, memory) the chart's documented formulas give for ``config``: a shadow destination
    has no queue (no disk, no read-ahead); an audited one (shadow or audit) remembers up to
    audit.max_series series; with workers > 1 the shared tables take disk once per pod."""
    rejected = parse_size((config.get("storage") or {}).get("rejected_max_bytes") or "64MiB", "")
    cache = parse_size((config.get("relabel_cache") or {}).get("max_bytes") or "1GiB", "")
    max_series = (config.get("audit") or {}).get("max_series", DEFAULT_MAX_SERIES)
    bodies = (config.get("server") or {}).get("max_buffered_body_bytes") or "128MiB"
    disk, memory = 0, cache + BASE_MEMORY + parse_size(bodies, "")
    for dest in config["remote_write"]:
        if dest.get("shadow") or dest.get("audit"):
            memory += max_series * SERIES_BYTES
        if dest.get("shadow"):
            continue
        queue = dest.get("queue_config") or {}
        disk += parse_size(queue.get("max_disk_bytes") or "1GiB", "") + rejected
        memory += parse_size(queue.get("max_memory_bytes") or "256MiB", "")
        memory += (dest.get("series_limit") or 0) * SERIES_BYTES
    return disk * workers + shared_tables(config, workers), memory * workers


def test_default_config_fits_the_default_memory_limit(chart: Any) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    config = yaml.safe_load(config_text(render(chart, WORKSPACE)))
    limit = quantity(values["resources"]["limits"]["memory"])
    # The relabel cache is bounded well below the limit (rwrouter's own default is 1GiB)...
    cache = parse_size(config["relabel_cache"]["max_bytes"], "")
    assert cache == 256 * MIB and cache < limit // 2
    # ...and so is each destination's read-ahead (rwrouter's own default is 256MiB).
    assert [d["queue_config"]["max_memory_bytes"] for d in config["remote_write"]] == [
        "64MiB",
        "64MiB",
    ]
    # ...and so is the audit of the workspace (rwrouter's own default is 2 M series, ~191MiB).
    assert config["audit"]["max_series"] * SERIES_BYTES == 50_000_000  # about 48MiB
    disk, memory = bounds(config)
    assert memory == (256 + 2 * 64 + 128 + 150) * MIB + 50_000_000 <= limit
    assert -(-memory // MIB) == 710  # the per-worker figure of the README and values.yaml
    # The disk bound fits the default claim (persistence.size) with one worker.
    assert disk == 2 * (1024 + 64) * MIB <= quantity(values["persistence"]["size"])
    assert "resources.limits.memory" not in notes(chart, WORKSPACE)
    # Two workers double it: above the default limit, and NOTES.txt says so.
    assert bounds(config, 2)[1] > limit
    text = notes(chart, merged(WORKSPACE, {"workers": 2}))
    assert "WARNING: resources.limits.memory (1Gi) is below" in text and "1420Mi" in text
    raised = {"workers": 2, "resources": {"limits": {"memory": "1500Mi"}}}
    assert "resources.limits.memory" not in notes(chart, merged(WORKSPACE, raised))
    # rwrouter's own defaults (the cache and read-ahead not bounded) exceed even one worker's.
    unbounded = {
        "config": {
            "relabel_cache": None,
            "remote_write": [{"name": "a", "url": "http://a:9090/api/v1/write"}],
        }
    }
    assert "about 1558Mi = workers (1)" in notes(chart, merged(WORKSPACE, unbounded))


@pytest.mark.parametrize(
    ("values", "size_limit"),
    [
        ({}, "2784Mi"),  # 2 x (1GiB + 64MiB) = 2176Mi, + a quarter + 64Mi
        ({"workers": 2}, "5507Mi"),  # 2 x 2176Mi + the 2MiB HA election table, + ...
        ({"workers": 3}, "8227Mi"),
        ({"config": {"storage": {"rejected_max_bytes": "1GiB"}}}, "5184Mi"),
        ({"emptyDir": {"sizeLimit": "8Gi"}}, "8Gi"),
        ({"emptyDir": {"sizeLimit": "1.5Gi"}}, "1.5Gi"),  # not parsed by the chart: not checked
        ({"emptyDir": {"sizeLimit": ""}}, None),
    ],
    ids=["default", "workers_2", "workers_3", "rejected_1GiB", "explicit", "fraction", "no_limit"],
)
def test_empty_dir_is_sized_from_the_disk_bounds(
    chart: Any, values: dict[str, Any], size_limit: str | None
) -> None:
    docs = render(chart, merged(WORKSPACE, values))
    volumes = {v["name"]: v for v in workload(docs)["spec"]["template"]["spec"]["volumes"]}
    expected = {"sizeLimit": size_limit} if size_limit else {}
    assert volumes["data"] == {"name": "data", "emptyDir": expected}
    if size_limit and size_limit.endswith("Mi") and "emptyDir" not in values:
        disk, _ = bounds(yaml.safe_load(config_text(docs)), values.get("workers", 1))
        assert quantity(size_limit) == -(-disk * 5 // (4 * MIB)) * MIB + 64 * MIB


DEFAULT_DISK = 2 * (1024 + 64) * MIB  # per worker: two queued destinations
AUDIT_BYTES = 500_000 * SERIES_BYTES  # the default config's audit.max_series, one destination
# per worker: the workspace audited, rwrouter's server.max_buffered_body_bytes (128MiB)
DEFAULT_MEMORY = (256 + 2 * 64 + 128 + 150) * MIB + AUDIT_BYTES
WORKSPACE_DEST, FALLBACK_DEST = DEFAULT_DESTINATIONS

# (id, values, disk added to the default config's estimate per worker, memory added per worker)
ESTIMATES: list[tuple[str, dict[str, Any], int, int]] = [
    ("default", {}, 0, 0),
    # A shadow destination has no queue: its queue_config (left in place) takes no disk and no
    # read-ahead; only the series its audit remembers count.
    ("shadow_candidate", SHADOW, 0, AUDIT_BYTES),
    ("shadow_candidate_workers_2", merged(SHADOW, {"workers": 2}), 0, AUDIT_BYTES),
    (
        "shadow_without_queue_config",
        {"config": {"remote_write": [*DEFAULT_DESTINATIONS, {"name": "bare", "shadow": True}]}},
        0,
        AUDIT_BYTES,
    ),
    # A sending destination takes rwrouter's default queue (1GiB + 64MiB rejected, 256MiB).
    (
        "sending_destination_added",
        {
            "config": {
                "remote_write": [
                    *DEFAULT_DESTINATIONS,
                    {"name": "more", "url": "http://m:9090/api/v1/write"},
                ]
            }
        },
        (1024 + 64) * MIB,
        256 * MIB,
    ),
    (
        "fallback_audited_too",
        {"config": {"remote_write": [WORKSPACE_DEST, {**FALLBACK_DEST, "audit": True}]}},
        0,
        AUDIT_BYTES,
    ),
    (
        "workspace_not_audited",
        {"config": {"remote_write": [{**WORKSPACE_DEST, "audit": False}, FALLBACK_DEST]}},
        0,
        -AUDIT_BYTES,
    ),
    (
        "rwrouter_default_max_series",
        {"config": {"audit": None}},
        0,
        (DEFAULT_MAX_SERIES - 500_000) * SERIES_BYTES,
    ),
    # The bodies held at once (server.max_buffered_body_bytes) count as they are set.
    (
        "bodies_bound_raised",
        {"config": {"server": {"max_buffered_body_bytes": "512MiB"}}},
        0,
        (512 - 128) * MIB,
    ),
    # 100 M series remembered: about 9.3GiB more, far above the default 1Gi limit.
    (
        "huge_max_series",
        {"config": {"audit": {"max_series": 100_000_000}}},
        0,
        (100_000_000 - 500_000) * SERIES_BYTES,
    ),
]


@pytest.mark.parametrize(
    ("values", "disk_added", "memory_added"),
    [(v, d, m) for _, v, d, m in ESTIMATES],
    ids=[i for i, _, _, _ in ESTIMATES],
)
def test_estimate_counts_audits_and_no_shadow_queue(
    chart: Any, values: dict[str, Any], disk_added: int, memory_added: int
) -> None:
    workers = values.get("workers", 1)
    elections = ELECTION_SLOTS * ELECTION_SLOT.size if workers > 1 else 0  # shared, 2MiB
    disk = (DEFAULT_DISK + disk_added) * workers + elections
    memory = (DEFAULT_MEMORY + memory_added) * workers
    docs = render(chart, merged(WORKSPACE, values))
    assert bounds(yaml.safe_load(config_text(docs)), workers) == (disk, memory)
    volumes = {v["name"]: v for v in workload(docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["emptyDir"]["sizeLimit"] == f"{-(-disk * 5 // (4 * MIB)) + 64}Mi"

    def limited(limit: str) -> str:
        return notes(chart, merged(WORKSPACE, values, {"resources": {"limits": {"memory": limit}}}))

    # The chart's memory estimate to the byte: a limit of exactly that is enough, a byte less
    # is warned about; with the default 1Gi, NOTES.txt warns when the estimate is above it.
    assert "resources.limits.memory" not in limited(str(memory))
    assert f"about {-(-memory // MIB)}Mi = workers ({workers})" in limited(str(memory - 1))
    default_limit = notes(chart, merged(WORKSPACE, values))
    warned = "WARNING: resources.limits.memory (1Gi) is below" in default_limit
    assert warned == (memory > 1024 * MIB)

    # Its disk estimate to the byte: a claim of exactly that is accepted, a byte less refused.
    def claim(size: int) -> dict[str, Any]:
        return merged(WORKSPACE, values, PERSISTENT, {"persistence": {"size": str(size)}})

    render(chart, claim(disk))
    with pytest.raises(helm.HelmError, match=r"persistence\.size \(\d+\) is smaller"):
        render(chart, claim(disk - 1))


def budgeted(*limits: int) -> dict[str, Any]:
    """The default config with ``series_limit`` on its first destinations (the workspace, then
    the fallback with on_series_limit: drop, the only action a fallback's budget may take)."""
    dests = copy.deepcopy(DEFAULT_DESTINATIONS)
    for dest, limit in zip(dests, limits, strict=False):
        dest["series_limit"] = limit
        if dest.get("fallback"):
            dest["on_series_limit"] = "drop"
    return {"config": {"remote_write": dests}}


# (values, bytes the workers' shared tables take on the queue volume, once per pod)
SHARED_TABLES = [
    pytest.param(budgeted(1_000_000), 0, id="one-process-no-table"),
    pytest.param({"workers": 2}, 2 * MIB, id="workers-2-election-table-only"),
    pytest.param(
        merged(budgeted(1_000_000), {"workers": 2}),
        2 * MIB + 64 * MIB + 4096,
        id="workers-2-budget-1M",
    ),
    pytest.param(
        merged(budgeted(1_000_000, 100_000), {"workers": 4}),
        2 * MIB + (64 * MIB + 4096) + (4 * MIB + 4096),
        id="workers-4-two-budgets",
    ),
    # 1,676,903 series: 2 x (limit + limit // 4 + 1024) slots = 4,194,304 exactly; one more
    # needs the next power of two
    pytest.param(
        merged(budgeted(1_676_903), {"workers": 2}),
        2 * MIB + 64 * MIB + 4096,
        id="workers-2-last-of-a-power-of-two",
    ),
    pytest.param(
        merged(budgeted(1_676_904), {"workers": 2}),
        2 * MIB + 128 * MIB + 4096,
        id="workers-2-next-power-of-two",
    ),
]


@pytest.mark.parametrize(("values", "shared"), SHARED_TABLES)
def test_disk_bound_counts_the_tables_the_workers_share(
    chart: Any, values: dict[str, Any], shared: int
) -> None:
    """With workers > 1 the HA election table and each series budget's table live in the
    supervisor's runtime directory on the queue volume (TMPDIR=/var/lib/rwrouter): the chart's
    disk bound, emptyDir.sizeLimit "auto" and the claim check count them once per pod, to
    the byte as rwrouter sizes the files."""
    workers = values.get("workers", 1)
    docs = render(chart, merged(WORKSPACE, values))
    config = yaml.safe_load(config_text(docs))
    assert shared_tables(config, workers) == shared  # the figures of values.yaml and the docs
    disk = DEFAULT_DISK * workers + shared
    assert bounds(config, workers)[0] == disk
    volumes = {v["name"]: v for v in workload(docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["data"]["emptyDir"]["sizeLimit"] == f"{-(-disk * 5 // (4 * MIB)) + 64}Mi"

    def claim(size: int) -> dict[str, Any]:
        return merged(WORKSPACE, values, PERSISTENT, {"persistence": {"size": str(size)}})

    render(chart, claim(disk))
    with pytest.raises(helm.HelmError, match=r"persistence\.size \(\d+\) is smaller"):
        render(chart, claim(disk - 1))


def test_container_port_follows_listen_address(chart: Any) -> None:
    docs = render(chart, {"config": {"server": {"listen_address": "[::]:8080"}}})
    assert container(docs)["ports"] == [{"name": "http", "containerPort": 8080, "protocol": "TCP"}]
    service = one(docs, "Service")["spec"]["ports"][0]
    assert (service["port"], service["targetPort"]) == (9250, "http")


@pytest.mark.parametrize(
    "path",
    ["data", "./queues", "/var/lib/rwrouter", "/var/lib/rwrouter/", "/var/lib/rwrouter/queues"],
)
def test_storage_path_on_the_volume_is_accepted(chart: Any, path: str) -> None:
    docs = render(chart, {"config": {"storage": {"path": path}}})
    assert yaml.safe_load(config_text(docs))["storage"]["path"] == path


@pytest.mark.parametrize(("workers", "grace"), [(None, 31), (1, 31), (2, 46), (4, 46)])
def test_grace_just_above_the_stop_time_is_accepted(
    chart: Any, workers: int | None, grace: int
) -> None:
    # One process stops within shutdown_timeout (30s); the supervisor kills a worker still
    # running 15 s later (REQUEST_GRACE 5 s + KILL_GRACE 10 s): the figure the chart checks.
    assert REQUEST_GRACE + KILL_GRACE == 15
    docs = render(chart, {"workers": workers, "terminationGracePeriodSeconds": grace})
    assert workload(docs)["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] == grace


def test_custom_config_is_rendered_verbatim(chart: Any) -> None:
    # A string is taken verbatim (e.g. --set-file config=my-rwrouter.yaml)...
    docs = render(
        chart, {"config": yaml.safe_dump(CUSTOM_CONFIG), "terminationGracePeriodSeconds": 120}
    )
    assert yaml.safe_load(config_text(docs)) == CUSTOM_CONFIG
    # ...a map is merged by Helm into the default map (lists such as remote_write replace the
    # default's; keys not given keep the default's: relabel_configs [] and the relabel_cache
    # and audit bounds here).
    docs = render(chart, {"config": CUSTOM_CONFIG, "terminationGracePeriodSeconds": 120})
    assert yaml.safe_load(config_text(docs)) == {
        **CUSTOM_CONFIG,
        "relabel_configs": [],
        "relabel_cache": {"max_bytes": "256MiB"},
        "audit": {"max_series": 500_000},
    }
    docs = render(
        chart,
        {
            "config": {
                **CUSTOM_CONFIG,
                "relabel_configs": None,
                "relabel_cache": None,
                "audit": None,
            },
            "terminationGracePeriodSeconds": 120,
        },
    )
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


@pytest.mark.parametrize(
    ("values", "args"),
    [
        ({}, None),
        ({"workers": 2}, ["--workers", "2"]),
        ({"workers": 1}, ["--workers", "1"]),
    ],
    ids=["unset", "two", "one"],
)
def test_workers_become_container_args(
    chart: Any, values: dict[str, Any], args: list[str] | None
) -> None:
    assert container(render(chart, values)).get("args") == args


@pytest.mark.parametrize("persistent", [False, True], ids=["deployment", "statefulset"])
def test_hpa_scales_the_workload_behind_client_ip_affinity(chart: Any, persistent: bool) -> None:
    values = merged(WORKSPACE, AFFINITY, HPA, PERSISTENT if persistent else {})
    docs = render(chart, values)
    hpa = one(docs, "HorizontalPodAutoscaler")
    target = workload(docs)
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": target["kind"],
        "name": target["metadata"]["name"],
    }
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
    assert monitor["spec"]["endpoints"] == [
        {"port": "http", "path": "/metrics", "scheme": "http", "interval": "30s"}
    ]
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
    pdb = one(
        render(chart, {"podDisruptionBudget": {"enabled": True, "minAvailable": 1}}),
        "PodDisruptionBudget",
    )
    assert pdb["spec"] == {"minAvailable": 1, "selector": pdb["spec"]["selector"]}


def test_optional_objects_are_off_by_default(chart: Any) -> None:
    kinds = {d["kind"] for d in render(chart, {})}
    assert not kinds & {
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "ServiceMonitor",
        "StatefulSet",
        "Secret",
    }
    assert "NetworkPolicy" in kinds  # on by default
    args = container(render(chart, {})).get("args", [])
    assert "--web.enable-lifecycle" not in args and "--web.config.file" not in args
    service = one(render(chart, {}), "Service")["spec"]
    assert service["sessionAffinity"] == "None" and "sessionAffinityConfig" not in service


@pytest.mark.parametrize(
    ("values", "message"), [(v, m) for _, v, m in FAILING], ids=[i for i, _, _ in FAILING]
)
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
    text = notes(
        chart,
        merged(
            WORKSPACE,
            PERSISTENT,
            AFFINITY,
            HPA,
            {
                "serviceAccount": {"roleArn": ROLE},
                "workers": 2,
                "resources": {"limits": {"memory": "2Gi"}},
            },
            WEB_TLS,
        ),
    )
    assert "WARNING" not in text and "roleArn is empty" not in text
    assert "sessionAffinity ClientIP" in text and "--workers 2" in text
    assert "The HPA helps new senders only" in text and "prefer the sidecar" in text
    assert "The HPA" not in notes(chart, merged(AFFINITY, {"replicaCount": 2}))
    assert f"https://{RELEASE}-rwrouter.{NAMESPACE}.svc:9250/api/v1/write" in text
    assert f"http://{RELEASE}-rwrouter.{NAMESPACE}.svc:9250/api/v1/write" in notes(chart, {})


NOTES_WARNINGS = [
    # id, values, a fragment NOTES.txt has, one it has not
    ("no_web_config", {}, "WARNING: no web configuration file", "networkPolicy.enabled is false"),
    ("web_config", WEB_TLS, "Point Prometheus at it", "no web configuration file"),
    ("existing_web_secret", WEB_EXISTING, "Point Prometheus at it", "no web configuration file"),
    (
        "no_network_policy",
        merged(WEB_TLS, {"networkPolicy": {"enabled": False}}),
        "WARNING: networkPolicy.enabled is false",
        "no web configuration file",
    ),
]


@pytest.mark.parametrize(
    ("values", "has", "lacks"),
    [c[1:] for c in NOTES_WARNINGS],
    ids=[c[0] for c in NOTES_WARNINGS],
)
def test_notes_warn_about_an_open_front_door(
    chart: Any, values: dict[str, Any], has: str, lacks: str
) -> None:
    text = notes(chart, values)
    assert has in text and lacks not in text


def test_web_config_is_a_secret_and_a_flag(chart: Any) -> None:
    docs = render(chart, merged(WORKSPACE, WEB_TLS))
    secret = one(docs, "Secret", f"{RELEASE}-rwrouter-web")
    assert yaml.safe_load(secret["stringData"]["web.yml"]) == WEB_TLS["webConfig"]["config"]
    assert "basic_auth_users" not in config_text(docs)  # not in the ConfigMap
    c = container(docs)
    assert c["args"] == ["--web.config.file", "/etc/rwrouter-web/config/web.yml"]
    volumes = {v["name"]: v for v in workload(docs)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["web-config"]["secret"] == {
        "secretName": f"{RELEASE}-rwrouter-web",
        "items": [{"key": "web.yml", "path": "web.yml"}],
    }
    assert volumes["web-tls"]["secret"] == {"secretName": "rwrouter-tls"}
    # the web configuration is re-read by rwrouter: changing it does not roll the pods
    other = merged(WEB_TLS, {"webConfig": {"config": {"basic_auth_users": {"x": "y"}}}})
    assert checksum(render(chart, merged(WORKSPACE, other))) == checksum(docs)


PROBES = [
    # id, webConfig, the probe kind, the scheme of the probes and the ServiceMonitor
    ("none", {}, "httpGet", "HTTP"),
    ("tls", WEB_TLS["webConfig"], "httpGet", "HTTPS"),
    (
        "client_certs_required",
        merged(
            WEB_TLS["webConfig"],
            {"config": {"tls_server_config": {"client_auth_type": "RequireAndVerifyClientCert"}}},
        ),
        "tcpSocket",
        "HTTPS",
    ),
    (
        "client_certs_verified_if_given",
        merged(
            WEB_TLS["webConfig"],
            {"config": {"tls_server_config": {"client_auth_type": "VerifyClientCertIfGiven"}}},
        ),
        "httpGet",
        "HTTPS",
    ),
    ("existing_secret_as_told", WEB_EXISTING["webConfig"], "tcpSocket", "HTTPS"),
    ("existing_secret_default", {"existingSecret": "rwrouter-web"}, "httpGet", "HTTP"),
]


@pytest.mark.parametrize(
    ("web", "probe", "scheme"), [c[1:] for c in PROBES], ids=[c[0] for c in PROBES]
)
def test_probes_and_scrapes_follow_the_web_config(
    chart: Any, web: dict[str, Any], probe: str, scheme: str
) -> None:
    docs = render(chart, merged(WORKSPACE, EXTRAS, {"webConfig": web}))
    c = container(docs)
    for name in ("livenessProbe", "readinessProbe"):
        kinds = {"httpGet", "tcpSocket"} & set(c[name])
        assert kinds == {probe}
        if probe == "httpGet":
            assert c[name]["httpGet"]["scheme"] == scheme
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["scheme"] == scheme.lower()


def test_servicemonitor_passes_tls_and_credentials(chart: Any) -> None:
    tls = {"ca": {"secret": {"name": "rwrouter-tls", "key": "ca.crt"}}, "serverName": "rwrouter"}
    auth = {"type": "Bearer", "credentials": {"name": "scrape-token", "key": "token"}}
    docs = render(
        chart,
        merged(
            WORKSPACE,
            EXTRAS,
            WEB_TLS,
            {"serviceMonitor": {"tlsConfig": tls, "authorization": auth}},
        ),
    )
    endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["tlsConfig"] == tls and endpoint["authorization"] == auth
    assert "basicAuth" not in endpoint


def test_network_policy_admits_only_writers_and_scrapers(chart: Any) -> None:
    docs = render(chart, WORKSPACE)
    policy = one(docs, "NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"] == workload(docs)["spec"]["selector"]["matchLabels"]
    assert policy["policyTypes"] == ["Ingress"]  # egress open: the workspace, STS, DNS
    prometheus = {"podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}}}
    assert policy["ingress"] == [
        {"from": [prometheus], "ports": [{"port": "http", "protocol": "TCP"}]}
    ]
    scraper = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "obs"}}}
    extra = {"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}
    values = {"networkPolicy": {"scrapers": [scraper], "extraIngress": [extra]}}
    policy = one(render(chart, merged(WORKSPACE, values)), "NetworkPolicy")["spec"]
    assert policy["ingress"] == [
        {"from": [prometheus, scraper], "ports": [{"port": "http", "protocol": "TCP"}]},
        extra,
    ]
    closed: dict[str, Any] = {"networkPolicy": {"writers": [], "scrapers": []}}
    assert one(render(chart, merged(WORKSPACE, closed)), "NetworkPolicy")["spec"]["ingress"] == []


def test_lifecycle_flag(chart: Any) -> None:
    args = container(render(chart, merged(WORKSPACE, {"lifecycle": True, "workers": 2})))["args"]
    assert args == ["--workers", "2", "--web.enable-lifecycle"]


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
        "v2",
        "0.3.0",
        rwrouter.__version__,
    )
