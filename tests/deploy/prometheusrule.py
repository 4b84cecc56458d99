"""deploy/k8s/prometheusrule.yaml, generated from deploy/prometheus/alerts.yml: the same groups in
a Prometheus Operator PrometheusRule. `python -m tests.deploy.prometheusrule` (from the repo root)
rewrites it; tests/deploy/test_manifests.py fails while the two differ."""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
ALERTS = DEPLOY / "prometheus" / "alerts.yml"
RULE = DEPLOY / "k8s" / "prometheusrule.yaml"

HEADER = """\
# GENERATED from deploy/prometheus/alerts.yml by `python -m tests.deploy.prometheusrule`: edit
# alerts.yml (and its tests, alerts_test.yml), then run that; tests/deploy checks they are equal.
# Optional (Prometheus Operator): add it to kustomization.yaml's resources when the
# monitoring.coreos.com CRDs are installed, with the labels your Prometheus' ruleSelector wants.
"""


def render() -> str:
    groups = yaml.safe_load(ALERTS.read_text())["groups"]
    rule = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "binlog-mirror", "labels": {"app.kubernetes.io/name": "binlog-mirror"}},
        "spec": {"groups": groups},
    }
    return HEADER + yaml.safe_dump(rule, sort_keys=False, width=4096, allow_unicode=True)


if __name__ == "__main__":
    RULE.write_text(render())
    sys.stdout.write(f"wrote {RULE}\n")
