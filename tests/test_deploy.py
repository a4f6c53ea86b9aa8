"""What an operator deploys with, checked by the tools that will read it: the systemd
unit by `systemd-analyze verify` (and its hardening by `systemd-analyze security`),
the Prometheus rules by `promtool check rules` and their unit tests by `promtool test
rules`, every metric they read by a scrape of a real server."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
import pytest
import yaml

from jobgate.cli import build_parser
from jobgate.v1 import admission_pb2
from tests.helpers import ROOT, promtool, required_tool, sample
from tests.server.helpers import Running, bearer, config_for, raw

DEPLOY = ROOT / "deploy"
RULES = DEPLOY / "prometheus" / "jobgate.rules.yml"
UNIT = DEPLOY / "jobgate.service"


def systemd_analyze() -> str:
    """systemd's checker (Debian's systemd package)."""
    return required_tool("systemd-analyze", "systemd")


def unit_here(tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this virtualenv's jobgate: verify checks the
    program exists, and /opt/jobgate is where an operator installs it, not here."""
    text = UNIT.read_text()
    assert "ExecStart=/opt/jobgate/bin/jobgate " in text
    unit = tmp_path / "jobgate.service"
    unit.write_text(text.replace("/opt/jobgate/bin/jobgate", str(Path(sys.executable).parent / "jobgate")))
    return unit


def test_the_systemd_unit_verifies_and_is_hardened(tmp_path):
    analyze = systemd_analyze()
    unit = unit_here(tmp_path)
    verified = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=120, check=False)
    assert verified.returncode == 0 and verified.stdout + verified.stderr == "", verified.stdout + verified.stderr  # not even a warning
    # The exposure systemd rates it (0 best, 10 worst): at most 2.0 ("OK").
    security = subprocess.run([analyze, "security", "--offline=yes", "--threshold=20", str(unit)], capture_output=True, text=True, timeout=120, check=False)
    assert security.returncode == 0, security.stdout[-3000:] + security.stderr
    assert re.search(r"Overall exposure level for jobgate.service: (1\.\d|0\.\d|2\.0) ", security.stdout), security.stdout[-500:]


def test_the_units_command_is_one_jobgate_takes():
    """ExecStart's arguments parse as `jobgate serve` takes them, and ExecReload sends
    the SIGHUP that reloads."""
    lines = dict(line.split("=", 1) for line in UNIT.read_text().splitlines() if "=" in line and not line.startswith("#"))
    program, *args = shlex.split(lines["ExecStart"])
    assert program.endswith("/jobgate")
    parsed = build_parser().parse_args(args)
    assert (parsed.command, parsed.config) == ("serve", "/etc/jobgate/jobgate.toml")
    assert lines["ExecReload"] == "/bin/kill -HUP $MAINPID"


def test_the_rules_load_and_pass_their_unit_tests():
    tool = promtool()
    checked = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=120, check=False)
    assert checked.returncode == 0 and "SUCCESS: 12 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = subprocess.run([tool, "test", "rules", "jobgate.rules.test.yml"], cwd=RULES.parent, capture_output=True, text=True, timeout=120, check=False)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr
    alerts = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"] if "alert" in rule}
    tests = yaml.safe_load((RULES.parent / "jobgate.rules.test.yml").read_text())["tests"]
    fired = {t["alertname"] for case in tests for t in case.get("alert_rule_test", []) if t["exp_alerts"]}
    assert alerts == {"JobgateErrorRateHigh", "JobgateLatencyHigh", "JobgateStoreFailing", "JobgateStoreFull", "JobgateDenialsHigh"}
    assert fired == alerts  # each alert is seen firing in a test


# A metric a rule reads: every one is read over a range (rate, increase), so a name,
# its selector if any, then `[`; a recording rule's name (level:metric:operations) is
# not one.
SELECTED = re.compile(r"(?<![\w:])([a-zA-Z_][a-zA-Z0-9_]*)\s*(\{[^}]*\})?\s*\[")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def test_every_metric_the_rules_read_is_one_jobgate_exports(tmp_path):
    """A real server's exposition holds each metric the rules read, and each label a
    rule selects or groups by is one of its labels (or Prometheus's job)."""
    cfg = config_for(tmp_path)
    r = Running(cfg.model_copy(update={"server": cfg.server.model_copy(update={"metrics_listen": "127.0.0.1:0"})}))
    try:
        r.admission.Admit(admission_pb2.AdmitRequest(document=raw(sample("jobspec.valid.json"))), metadata=r.auth)
        with pytest.raises(grpc.RpcError):
            r.admission.Admit(admission_pb2.AdmitRequest(document=raw(sample("jobspec.valid.json"))), metadata=bearer("wrong"))
        text = urllib.request.urlopen(f"http://127.0.0.1:{r.metrics_port}/metrics", timeout=10).read().decode()
    finally:
        r.close()
    families = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    labels: dict[str, set[str]] = {}
    for name, inner in re.findall(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}", text, re.M):
        labels.setdefault(name, set()).update(re.findall(r'(\w+)="', inner))
    read: set[str] = set()
    for group in yaml.safe_load(RULES.read_text())["groups"]:
        for rule in group["rules"]:
            expr, what = rule["expr"], rule.get("record") or rule.get("alert")
            metrics = [(name, selector) for name, selector in SELECTED.findall(expr) ]
            for name, selector in metrics:
                read.add(name)
                histogram = name.endswith("_bucket") and families.get(name.removesuffix("_bucket")) == "histogram"
                assert histogram or name in families or name.removesuffix("_total") in families, f"{what} reads {name}, which jobgate does not export"
                if name in labels:  # a series was exported: its labels are known
                    assert set(MATCHER.findall(selector)) <= labels[name] | {"job"}, (what, name, selector)
            exported = set().union(*(labels.get(name, set()) for name, _ in metrics)) | {"job", "le"}
            for by in re.findall(r"by \(([^)]*)\)", expr):
                grouped = {label.strip() for label in by.split(",")}
                if metrics and all(name in labels for name, _ in metrics):
                    assert grouped <= exported, (what, grouped - exported)
    assert read >= {"grpc_server_handled_total", "grpc_server_handling_seconds_bucket", "jobgate_admissions_total", "jobgate_denials_total", "jobgate_store_failures_total", "jobgate_store_seconds_bucket"}
