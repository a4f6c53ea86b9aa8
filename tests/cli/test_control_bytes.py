"""Text output never carries a control character from a document, a file name or a
server to the terminal: a key holding ESC and NUL, a file named with an escape
sequence and a transition message that would retitle the terminal are written as
\\u001b, \\u0000 … by `jobgate check`, `submit` and `jobs`, run as real processes
with their output piped."""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.helpers import sample
from tests.server.helpers import POLLER, TOKEN, Running, config_for

# What a terminal would act on: C0 controls but the newline ending each line, DEL, and
# the C1 controls (in UTF-8).
RAW_CONTROL = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")
KEY = "bad\x1b[31mkey\x00z"
SHOWN_KEY = "bad\\u001b[31mkey\\u0000z"


def jobgate(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "jobgate.cli", *args], capture_output=True, timeout=120, check=False)
    for stream in (done.stdout, done.stderr):
        assert RAW_CONTROL.search(stream) is None, stream
    return done


def hostile_document(tmp_path):
    doc = sample("jobspec.valid.json")
    doc["spec"][KEY] = 1  # an unknown field: a warning, at its pointer
    path = tmp_path / "job\x1b]0;owned\x07.json"
    path.write_text(json.dumps(doc))
    return path


def test_check_escapes_control_characters_in_keys_and_file_names(tmp_path):
    path = hostile_document(tmp_path)
    shown = str(path).replace("\x1b", "\\u001b").replace("\x07", "\\u0007")
    text = jobgate("check", str(path))
    assert text.returncode == 0
    lines = text.stdout.decode().splitlines()
    assert lines[0] == f"{shown}: pass (jobspec) — 1 warning"
    assert lines[1].startswith(f"{shown}:1:") and lines[1].endswith(f"(at /spec/{SHOWN_KEY})")
    assert f'the field "{SHOWN_KEY}" is not a known field' in lines[1]  # the message spells it alike
    github = jobgate("check", str(path), "--format", "github").stdout.decode()
    assert f"::warning file={shown}," in github and f"(at /spec/{SHOWN_KEY})" in github


def test_submit_and_jobs_escape_what_the_server_sends_back(tmp_path):
    path = hostile_document(tmp_path)
    r = Running(config_for(tmp_path))
    try:
        server = ["--server", f"127.0.0.1:{r.port}"]
        submitted = jobgate("submit", str(path), *server, "--token", TOKEN)
        assert submitted.returncode == 0
        out = submitted.stdout.decode()
        assert f"(at /spec/{SHOWN_KEY})" in out
        job_id = re.search(r"admitted as job (\S+)", out).group(1)
        marked = jobgate("jobs", "mark", job_id, "RUNNING", "--message", "\x1b]0;owned\x07 \x1b[2J started", *server, "--token", POLLER)
        assert marked.returncode == 0
        message = "\\u001b]0;owned\\u0007 \\u001b[2J started"
        assert marked.stdout.decode().rstrip().endswith(message)
        listed = jobgate("jobs", "list", *server, "--token", POLLER)
        assert listed.stdout.decode().rstrip().endswith(message)
        shown = jobgate("jobs", "show", job_id, "--format", "text", *server, "--token", POLLER)
        assert shown.stdout.decode().rstrip().endswith(message)
    finally:
        r.close()
