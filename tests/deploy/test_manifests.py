"""The deployment files under deploy/ (all but the Helm chart): the sidecar manifest validates
against the Kubernetes schemas and embeds configurations Prometheus and rwrouter accept, the IAM
policies are least-privilege, and the dashboard and alert rules use only metric names that
rwrouter exports (a renamed metric fails here). Offline; promtool runs with a timeout."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped,unused-ignore]
import pytest
import yaml
from kubernetes_validate.utils import latest_version  # type: ignore[import-untyped,unused-ignore]
from prometheus_client.parser import text_string_to_metric_families

from rwrouter.config import OnSeriesLimit
from rwrouter.config.load import load_config
from rwrouter.metrics import Metrics, merge_expositions
from rwrouter.routing import BudgetState

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
SIDECAR = DEPLOY / "kubernetes" / "sidecar.yaml"
DASHBOARD = DEPLOY / "grafana" / "rwrouter.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
ALERTS_TEST = DEPLOY / "prometheus" / "alerts_test.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"
ENV = {
    "AWS_REGION": "eu-west-1",
    "AMP_WORKSPACE_ID": "ws-1234",
    "SELF_HOSTED_WRITE_URL": "http://prometheus-central:9090/api/v1/write",
}
# Series rwrouter does not export that an alert expression may read.
FOREIGN_SERIES = {"DCGM_FI_DEV_GPU_UTIL"}


# -- helpers ------------------------------------------------------------------------------------


def _documents() -> list[dict[str, Any]]:
    with SIDECAR.open(encoding="utf-8") as file:
        return [d for d in yaml.safe_load_all(file) if d]


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    found = [
        d
        for d in _documents()
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"{kind} {name}: {len(found)} documents"
    return found[0]


def _config_file(key: str) -> str:
    for doc in _documents():
        if doc["kind"] == "ConfigMap" and key in doc.get("data", {}):
            text = doc["data"][key]
            assert isinstance(text, str)
            return text
    raise AssertionError(f"no ConfigMap holds {key}")


def _container(name: str) -> dict[str, Any]:
    spec = _one("StatefulSet")["spec"]["template"]["spec"]
    (container,) = [c for c in spec["containers"] if c["name"] == name]
    assert isinstance(container, dict)
    return container


def _promtool() -> str:
    """Path of promtool; skip locally, fail on CI when it is missing (as tests/support does for
    the prometheus binary)."""
    binary = shutil.which("promtool")
    if binary is None:
        message = "the 'promtool' binary is not installed (Debian package 'prometheus')"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set: must not be skipped)", pytrace=False)
        pytest.skip(message)
    return binary


def _promtool_run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_promtool(), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def _exposed_names() -> set[str]:
    """Every sample name rwrouter's /metrics can show: a single process's registry and the
    merged view of `run --workers` (rwrouter_workers, rwrouter_worker_up, write connections),
    with an audited destination, one with a series_limit and one with ha_dedup (the
    rwrouter_audit_*, rwrouter_series_limit* and rwrouter_ha_* gauges are absent without
    one)."""
    metrics = Metrics()
    metrics.process.watch_write_connections(lambda: 0.0)
    metrics.audit.totals.source = lambda: ({"workspace": (1, 1)}, 50_000_000)
    budget = BudgetState(1000, 1, {"gpu_util": 1}, 1, OnSeriesLimit.FALLBACK)
    metrics.audit.budgets.source = lambda: {"workspace": budget}  # (absent without a budget)
    ha = ({"workspace": ("cluster", "__replica__", 30.0)}, [("workspace", "c", "a", 1.0)])
    metrics.send.ha.source = lambda: ha  # (absent without ha_dedup)
    text = metrics.exposition()[0].decode()
    merged = merge_expositions({"0": text}, workers=2).decode()
    suffixes = {
        "counter": ["_total"],
        "histogram": ["_bucket", "_sum", "_count"],
        "gauge": [""],
        "summary": ["", "_sum", "_count"],
    }
    return {
        family.name + suffix
        for family in text_string_to_metric_families(merged)
        for suffix in suffixes.get(family.type, [""])
    }


_NAME = re.compile(r"\b(rwrouter_[a-zA-Z0-9_]+|DCGM_[A-Z0-9_]+)\b")


def _names_in(expr: str) -> set[str]:
    return set(_NAME.findall(expr))


def _dashboard() -> dict[str, Any]:
    data = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def _alert_rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))
    return [rule for group in data["groups"] for rule in group["rules"]]


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings of a Markdown text."""
    anchors = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^a-z0-9 _-]", "", title).replace(" ", "-"))
    return anchors


# -- Kubernetes manifest -------------------------------------------------------------------------


def test_every_sidecar_document_validates_against_the_kubernetes_schemas() -> None:
    documents = _documents()
    kinds = sorted(d["kind"] for d in documents)
    assert {"ServiceAccount", "ConfigMap", "StatefulSet"} <= set(kinds), kinds
    for doc in documents:
        kubernetes_validate.validate(doc, latest_version(), strict=True)


def test_strict_validation_catches_a_misspelt_field() -> None:
    # Guards the check above: strict schemas refuse unknown fields.
    statefulset = _one("StatefulSet")
    statefulset["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(statefulset, latest_version(), strict=True)


def _prometheus_config_files() -> tuple[str, dict[str, str]]:
    """The file name of Prometheus's --config.file and every file of the directory it is in, as
    the pod sees it: the keys of the ConfigMaps of the volume mounted there (a configMap or a
    projected volume)."""
    container = _container("prometheus")
    (config_arg,) = [a for a in container["args"] if a.startswith("--config.file=")]
    config_dir, _, config_name = config_arg.removeprefix("--config.file=").rpartition("/")
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == config_dir]
    volumes = _one("StatefulSet")["spec"]["template"]["spec"]["volumes"]
    (volume,) = [v for v in volumes if v["name"] == mount["name"]]
    if "projected" in volume:
        names = [s["configMap"]["name"] for s in volume["projected"]["sources"]]
    else:
        names = [volume["configMap"]["name"]]
    files: dict[str, str] = {}
    for name in names:
        data = _one("ConfigMap", name)["data"]
        assert not set(data) & set(files), f"{name}: a file name used twice in {config_dir}"
        files.update(data)
    return config_name, files


def test_embedded_prometheus_config_passes_promtool(tmp_path: Path) -> None:
    # The files of the mounted directory, side by side as in the pod: promtool checks that the
    # rule files exist and are valid.
    config_name, files = _prometheus_config_files()
    for name, text in files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    config = tmp_path / config_name
    result = _promtool_run("check", "config", str(config))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_alert_rules())} rules found" in result.stdout, result.stdout
    parsed = yaml.safe_load(config.read_text())
    assert [w["url"] for w in parsed["remote_write"]] == ["http://localhost:9250/api/v1/write"]


def test_prometheus_loads_the_alert_rules_and_sends_to_an_alertmanager() -> None:
    config_name, files = _prometheus_config_files()
    config = yaml.safe_load(files[config_name])
    assert config["rule_files"] == ["alerts.yaml"]
    assert files["alerts.yaml"] == ALERTS.read_text(encoding="utf-8")
    (alertmanagers,) = config["alerting"]["alertmanagers"]
    assert alertmanagers["dns_sd_configs"][0]["port"] == 9093


def test_alert_rules_config_map_equals_deploy_prometheus_alerts_yaml() -> None:
    # The ConfigMap is a copy: after editing deploy/prometheus/alerts.yaml, paste it into the
    # ConfigMap rwrouter-alerts of deploy/kubernetes/sidecar.yaml.
    data = _one("ConfigMap", "rwrouter-alerts")["data"]
    assert set(data) == {"alerts.yaml"}
    assert data["alerts.yaml"] == ALERTS.read_text(encoding="utf-8"), (
        "the ConfigMap rwrouter-alerts of sidecar.yaml differs from deploy/prometheus/alerts.yaml"
    )


def test_embedded_rwrouter_config_loads_with_the_container_env(tmp_path: Path) -> None:
    config_file = tmp_path / "rwrouter.yaml"
    config_file.write_text(_config_file("rwrouter.yaml"), encoding="utf-8")
    env_names = {e["name"] for e in _container("rwrouter")["env"]}
    assert set(ENV) <= env_names, "every ${VAR} of rwrouter.yaml is set on the container"
    config = load_config(config_file, env=ENV)
    by_name = {d.name: d for d in config.remote_write}
    assert set(by_name) == {"workspace", "self-hosted"}
    assert by_name["workspace"].sigv4 is not None
    assert by_name["workspace"].audit, "RwrouterAuditedSeriesNearLimit reads its audit metrics"
    assert by_name["workspace"].url == (
        "https://aps-workspaces.eu-west-1.amazonaws.com/workspaces/ws-1234/api/v1/remote_write"
    )
    assert by_name["self-hosted"].fallback
    assert "DCGM_FI_DEV_GPU_UTIL" in config_file.read_text()


def test_embedded_rwrouter_config_without_its_env_is_refused(tmp_path: Path) -> None:
    config_file = tmp_path / "rwrouter.yaml"
    config_file.write_text(_config_file("rwrouter.yaml"), encoding="utf-8")
    with pytest.raises(Exception, match="AWS_REGION"):
        load_config(config_file, env={})


RWROUTER_CONTAINER_CASES = [
    ("run_as_non_root", ["securityContext", "runAsNonRoot"], True),
    ("user_10001", ["securityContext", "runAsUser"], 10001),
    ("read_only_root", ["securityContext", "readOnlyRootFilesystem"], True),
    ("no_privilege_escalation", ["securityContext", "allowPrivilegeEscalation"], False),
    ("drop_all_capabilities", ["securityContext", "capabilities", "drop"], ["ALL"]),
    ("seccomp_runtime_default", ["securityContext", "seccompProfile", "type"], "RuntimeDefault"),
    ("liveness_healthy", ["livenessProbe", "httpGet", "path"], "/-/healthy"),
    ("readiness_ready", ["readinessProbe", "httpGet", "path"], "/-/ready"),
    ("memory_limit", ["resources", "limits", "memory"], "1Gi"),
    ("cpu_request", ["resources", "requests", "cpu"], "250m"),
]


@pytest.mark.parametrize(
    ("path", "expected"),
    [(p, e) for _, p, e in RWROUTER_CONTAINER_CASES],
    ids=[n for n, _, _ in RWROUTER_CONTAINER_CASES],
)
def test_rwrouter_container_settings(path: list[str], expected: object) -> None:
    value: Any = _container("rwrouter")
    for key in path:
        value = value[key]
    assert value == expected


def test_rwrouter_container_image_entrypoint_and_volumes() -> None:
    container = _container("rwrouter")
    assert "rwrouter" in container["image"]
    assert "command" not in container, "the image's entrypoint runs rwrouter"
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    assert mounts["/etc/rwrouter"].get("readOnly") is True
    queue = mounts["/var/lib/rwrouter"]["name"]
    statefulset = _one("StatefulSet")
    claims = {c["metadata"]["name"] for c in statefulset["spec"].get("volumeClaimTemplates", [])}
    volumes = {v["name"]: v for v in statefulset["spec"]["template"]["spec"]["volumes"]}
    assert queue in claims or "emptyDir" in volumes.get(queue, {})
    ports = {p["containerPort"] for p in container["ports"]}
    assert ports == {9250}


def test_service_account_has_the_irsa_annotation() -> None:
    account = _one("ServiceAccount")
    role = account["metadata"]["annotations"]["eks.amazonaws.com/role-arn"]
    assert re.fullmatch(r"arn:aws:iam::[A-Z0-9_]+:role/[A-Za-z0-9_+=,.@-]+", role)
    spec = _one("StatefulSet")["spec"]["template"]["spec"]
    assert spec["serviceAccountName"] == account["metadata"]["name"]


# -- IAM -----------------------------------------------------------------------------------------

IAM_CASES = [
    (
        "remote_write_policy",
        "aps-remote-write-policy.json",
        "aps:RemoteWrite",
        r"arn:aws:aps:REGION:ACCOUNT_ID:workspace/WORKSPACE_ID",
    ),
    ("irsa_trust_policy", "irsa-trust-policy.json", "sts:AssumeRoleWithWebIdentity", None),
]


@pytest.mark.parametrize(
    ("file", "action", "resource"), [c[1:] for c in IAM_CASES], ids=[c[0] for c in IAM_CASES]
)
def test_iam_policy(file: str, action: str, resource: str | None) -> None:
    policy = json.loads((DEPLOY / "iam" / file).read_text(encoding="utf-8"))
    assert policy["Version"] == "2012-10-17"
    (statement,) = policy["Statement"]
    assert statement["Effect"] == "Allow"
    assert statement["Action"] in (action, [action]), "exactly one action: least privilege"
    if resource is not None:
        assert statement["Resource"] == resource
        assert "*" not in json.dumps(policy)


def test_irsa_trust_policy_is_bound_to_one_service_account() -> None:
    policy = json.loads((DEPLOY / "iam" / "irsa-trust-policy.json").read_text(encoding="utf-8"))
    (statement,) = policy["Statement"]
    provider = statement["Principal"]["Federated"]
    match = re.fullmatch(
        r"arn:aws:iam::ACCOUNT_ID:oidc-provider/(oidc\.eks\.REGION\.amazonaws"
        r"\.com/id/OIDC_ID)",
        provider,
    )
    assert match
    issuer = match.group(1)
    conditions = statement["Condition"]["StringEquals"]
    assert conditions == {
        f"{issuer}:sub": "system:serviceaccount:NAMESPACE:SERVICE_ACCOUNT",
        f"{issuer}:aud": "sts.amazonaws.com",
    }


# -- Grafana dashboard ---------------------------------------------------------------------------


def test_dashboard_top_level_and_variables() -> None:
    dashboard = _dashboard()
    for key in ("uid", "title", "schemaVersion", "panels", "templating", "time"):
        assert key in dashboard, key
    assert 36 <= dashboard["schemaVersion"] <= 41
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    for label, variable in variables.items():
        if label == "datasource":
            continue
        query = variable["query"]
        query = query["query"] if isinstance(query, dict) else query
        match = re.fullmatch(rf"label_values\((rwrouter_\w+)(\{{[^}}]*\}})?, {label}\)", query)
        assert match and match.group(1) in _exposed_names(), (label, query)
        assert variable["definition"] == query, label
        # The choices of the other variables follow the chosen instances.
        assert label == "instance" or _unfiltered_selectors(query) == [], (label, query)
    instance = variables["instance"]
    assert instance["query"]["query"] == "label_values(rwrouter_build_info, instance)"
    assert instance["multi"] is True and instance["includeAll"] is True
    names = [v["name"] for v in dashboard["templating"]["list"]]
    assert names.index("instance") < min(names.index("destination"), names.index("worker"))


def test_dashboard_panels_have_unique_ids_and_a_row_repeated_by_destination() -> None:
    panels = list(_panels(_dashboard()["panels"]))
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), ids
    assert any(p["type"] == "row" and p.get("repeat") == "destination" for p in panels)
    for panel in panels:
        if panel["type"] != "row":
            assert panel["targets"], panel["title"]
            assert panel["datasource"]["uid"] == "${datasource}", panel["title"]


_SELECTOR = re.compile(r"\b(rwrouter_[a-zA-Z0-9_]+)(\{[^}]*\})?")
INSTANCE_FILTER = 'instance=~"$instance"'


def _unfiltered_selectors(expr: str) -> list[str]:
    """The series selectors of expr without the dashboard's instance filter."""
    return [
        m.group(0)
        for m in _SELECTOR.finditer(expr)
        if INSTANCE_FILTER not in re.split(r"\s*,\s*", (m.group(2) or "{}")[1:-1])
    ]


def test_unfiltered_selectors_finds_every_selector_without_the_instance_filter() -> None:
    # Guards the check below.
    expr = (
        'sum(rate(rwrouter_a_total{instance=~"$instance",worker=~"$worker"}[5m]))'
        ' / sum(rate(rwrouter_b_total{worker=~"$worker"}[5m])) + rwrouter_c'
        ' + rwrouter_d{instance="x"} + rwrouter_e{job="r", instance=~"$instance"}'
    )
    assert _unfiltered_selectors(expr) == [
        'rwrouter_b_total{worker=~"$worker"}',
        "rwrouter_c",
        'rwrouter_d{instance="x"}',
    ]


def _dashboard_exprs() -> list[tuple[str, str]]:
    return [
        (p["title"], t["expr"])
        for p in _panels(_dashboard()["panels"])
        for t in p.get("targets", [])
    ]


@pytest.mark.parametrize(
    ("title", "expr"),
    _dashboard_exprs(),
    ids=[f"{t}:{i}" for i, (t, _) in enumerate(_dashboard_exprs())],
)
def test_dashboard_expression_uses_exported_metrics(title: str, expr: str) -> None:
    names = _names_in(expr)
    assert names, f"{title}: no rwrouter metric in {expr!r}"
    assert names <= _exposed_names(), f"{title}: not exported: {names - _exposed_names()}"


@pytest.mark.parametrize(
    ("title", "expr"),
    _dashboard_exprs(),
    ids=[f"{t}:{i}" for i, (t, _) in enumerate(_dashboard_exprs())],
)
def test_dashboard_expression_filters_by_instance(title: str, expr: str) -> None:
    # With several rwrouter instances (replicas, one sidecar per Prometheus) a panel must not
    # sum over instances the viewer did not choose.
    assert _unfiltered_selectors(expr) == [], f"{title}: {expr}"


# -- alert rules ---------------------------------------------------------------------------------


PROMTOOL_CASES = [
    ("check_rules", ["check", "rules", str(ALERTS)]),
    ("test_rules", ["test", "rules", str(ALERTS_TEST)]),
]


@pytest.mark.parametrize("args", [a for _, a in PROMTOOL_CASES], ids=[n for n, _ in PROMTOOL_CASES])
def test_promtool_accepts_the_alert_rules(args: list[str]) -> None:
    result = _promtool_run(*args)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("rule", _alert_rules(), ids=[r["alert"] for r in _alert_rules()])
def test_alert_rule(rule: dict[str, Any]) -> None:
    names = _names_in(rule["expr"])
    assert names - FOREIGN_SERIES, "reads at least one rwrouter metric"
    assert names - FOREIGN_SERIES <= _exposed_names(), names - _exposed_names()
    assert rule["labels"]["severity"] in {"warning", "critical"}
    annotations = rule["annotations"]
    assert annotations["summary"] and annotations["description"]
    url, _, anchor = annotations["runbook_url"].partition("#")
    assert url.endswith("docs/runbook.md")
    assert anchor in _anchors(RUNBOOK.read_text(encoding="utf-8")), anchor
    test_text = ALERTS_TEST.read_text(encoding="utf-8")
    assert f"alertname: {rule['alert']}\n" in test_text, "has promtool unit tests"


def test_runbook_critical_series_section_starts_with_the_relabel_debugger() -> None:
    runbook = RUNBOOK.read_text(encoding="utf-8")
    section = runbook.split("## RwrouterCriticalSeriesNotForwarded", 1)[1].split("\n## ", 1)[0]
    confirm = section.split("**Confirm.**", 1)[1]
    first_check = confirm.split("\n- ", 2)[1]
    assert "kubectl -n $NS exec $POD -c rwrouter" in first_check
    assert "rwrouter relabel --config /etc/rwrouter/rwrouter.yaml --series" in first_check
    assert "(relabel-debugger.md)" in first_check
    mounts = {m["mountPath"] for m in _container("rwrouter")["volumeMounts"]}
    assert "/etc/rwrouter" in mounts
    assert "rwrouter.yaml" in _one("ConfigMap", "prometheus-rwrouter-rwrouter")["data"]
