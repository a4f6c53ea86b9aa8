"""`jobgate jobs audit --against`: the admitted documents of unfinished jobs, judged
under a candidate configuration (Gatekeeper's audit of what already runs)."""

from __future__ import annotations

import json

import pytest

from jobgate.cli import main as cli_main
from jobgate.v1 import admission_pb2, jobs_pb2
from tests.helpers import DEMO_CONFIG, run_cli, sample
from tests.server.helpers import Running, config_for


def test_audit_names_the_unfinished_jobs_a_candidate_would_refuse(tmp_path, capsys):
    r = Running(config_for(tmp_path))
    try:
        admit = lambda doc: r.admission.Admit(admission_pb2.AdmitRequest(document=admission_pb2.Document(raw=json.dumps(doc).encode())), metadata=r.auth).job_id  # noqa: E731
        pinned = admit(sample("jobspec.valid.json"))
        finished = admit({**sample("jobspec.valid.json"), "metadata": {**sample("jobspec.valid.json")["metadata"], "name": "done"}})
        other = admit({**sample("jobspec.valid.json"), "metadata": {**sample("jobspec.valid.json")["metadata"], "name": "elsewhere", "project": "other-lab"}})
        r.jobs.MarkJob(jobs_pb2.MarkJobRequest(job_id=finished, state="COMPLETE", source="agent"), metadata=r.backend)
    finally:
        r.close()
    store = str(tmp_path / "store")
    candidate = tmp_path / "candidate.toml"
    candidate.write_text(DEMO_CONFIG.read_text().replace('name = "nemo-rl/grpo", version = "0.7.0"', 'name = "nemo-rl/grpo", version = "0.8.0"'))
    current = tmp_path / "current.toml"
    current.write_text(DEMO_CONFIG.read_text() + f'\n[store]\npath = "{store}"\n')
    code, out = run_cli(capsys, ["jobs", "audit", "--config", str(current), "--against", str(candidate), "--format", "json"])
    assert code == 1
    result = json.loads(out)
    assert sorted(c["source"] for c in result["changes"]) == sorted([pinned, other])  # not the finished one
    assert result["impact"]["items"] == 2 and result["impact"]["newly_failing"] == 2
    assert result["impact"]["by_project"] == {"my-lab": {"changed": 1, "newly_failing": 1, "newly_passing": 0}, "other-lab": {"changed": 1, "newly_failing": 1, "newly_passing": 0}}
    assert {v["rule"] for c in result["changes"] for v in c["added"]} == {"forge.handshake.version"}
    code, out = run_cli(capsys, ["jobs", "audit", "--config", str(current), "--against", str(current)])
    assert code == 0 and "0 of 2 items judged otherwise" in out


def test_audit_offers_no_server_option(capsys):
    """audit reads the admitted documents from the store: its help offers no --server
    (nor the options of a connection), and one given is refused as unknown."""
    with pytest.raises(SystemExit) as exit_:
        cli_main(["jobs", "audit", "--help"])
    assert exit_.value.code == 0
    usage = capsys.readouterr().out
    assert "--store" in usage and "--config" in usage and "--against" in usage
    for option in ("--server", "--token", "--ca", "--cert", "--timeout"):
        assert option not in usage
    with pytest.raises(SystemExit) as exit_:
        cli_main(["jobs", "audit", "--server", "127.0.0.1:1", "--against", "candidate.toml"])
    assert exit_.value.code == 2
    assert "unrecognized arguments: --server" in capsys.readouterr().err
