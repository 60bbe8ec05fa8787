"""The alert rules and the dashboard that ship in deploy/: the rules pass promtool's check and
their unit tests, and every metric the rules and the dashboard query is one /metrics serves."""

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "opsconsole.json"
TOKEN = "scrape-me-0123456789"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("needs promtool (Debian's prometheus package; .ci/run installs it)")
    return found


def run(*args) -> subprocess.CompletedProcess:
    return subprocess.run([promtool(), *args], cwd=RULES.parent, capture_output=True, text=True)


def test_the_rules_pass_promtool_check():
    checked = run("check", "rules", RULES.name)

    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 7 rules found" in checked.stdout


def test_each_alert_fires_on_its_synthetic_series_and_not_before():
    tested = run("test", "rules", "alerts.test.yml")

    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_a_broken_expectation_fails_the_rule_tests(tmp_path):
    """The control: promtool's test really compares (a wrong expected value fails it)."""
    broken = (RULES.parent / "alerts.test.yml").read_text().replace("demo: 60 items", "demo: 61 items")
    (tmp_path / "alerts.yml").write_text(RULES.read_text())
    (tmp_path / "alerts.test.yml").write_text(broken)

    tested = subprocess.run(
        [promtool(), "test", "rules", "alerts.test.yml"], cwd=tmp_path, capture_output=True, text=True
    )

    assert tested.returncode != 0


def queried_metrics(text: str) -> set[str]:
    names = set(re.findall(r"\b(opsconsole_[a-z_]+)", text))
    # A histogram is queried by its series (_bucket, _sum, _count), served under its own name.
    return {re.sub(r"_(bucket|sum|count)$", "", name) for name in names}


def test_the_rules_and_the_dashboard_query_only_metrics_that_are_served(client, workspace, settings):
    settings.OPSCONSOLE_METRICS_TOKEN = TOKEN
    body = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    served = set(re.findall(r"^# TYPE (\S+) ", body, re.M))
    served |= {re.sub(r"_total$", "", name) for name in list(served)}  # counters: name and name_total
    served |= {f"{name}_total" for name in list(served)}
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = " ".join(target["expr"] for panel in dashboard["panels"] for target in panel["targets"])

    assert queried_metrics(RULES.read_text()) - served == set()
    assert queried_metrics(exprs) - served == set()
    assert len(dashboard["panels"]) >= 5
