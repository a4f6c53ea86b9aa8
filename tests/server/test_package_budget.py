"""A package sent with a request costs work bounded by its size and by the call's
deadline: a compression bomb is refused (`limits.size`, naming
`limits.max_package_ratio`) after at most its budget is inflated, and a call whose
deadline passes while its package is read stops using the server's CPU. The same bombs
through the Python API and the command line: tests/files/test_package_budget.py."""

from __future__ import annotations

import json
import time

import grpc
import pytest

from jobgate.v1 import admission_pb2, jobs_pb2
from tests.files.archives import MiB, bomb, bundle
from tests.files.test_package_budget import BOMBS
from tests.server.helpers import Running, config_for


def admit(running, package: bytes, *, dry_run: bool = False, timeout: float | None = None):
    document = admission_pb2.Document(raw=json.dumps(bundle({})).encode(), package=package)
    return running.admission.Admit(admission_pb2.AdmitRequest(document=document, dry_run=dry_run), metadata=running.auth, timeout=timeout)


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_a_compression_bomb_is_refused_by_admit_and_opens_nothing(running, name):
    shape, size, how = BOMBS[name]
    package = bomb(shape, size)
    for dry_run in (True, False):
        r = admit(running, package, dry_run=dry_run)
        assert r.report.verdict == "fail" and not r.job_id
        assert [(v.rule, v.field) for v in r.report.violations] == [("limits.size", "")]
        message = r.report.violations[0].message
        said = "declares" if how == "declares" else "inflates past"
        assert message.startswith(f"the package <package> {said} ")
        assert f"more than limits.max_package_ratio = 100 times its {len(package)} bytes allows" in message
    assert list(running.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=running.auth).jobs) == []


def settled_cpu(limit: float = 60.0) -> float:
    """The process's CPU time once it has gone idle (under 5% of a core for 0.4 s):
    whatever work a call left behind has finished or stopped."""
    end = time.monotonic() + limit
    before = time.process_time()
    while time.monotonic() < end:
        time.sleep(0.4)
        now = time.process_time()
        if now - before < 0.02:
            return now
        before = now
    raise AssertionError(f"the server kept working for {limit} s")


def test_the_deadline_of_admit_stops_reading_the_package(tmp_path):
    # With the ratio raised out of the way, 1000 MiB of a Python helper (33 KiB as
    # tar.zst) takes the server seconds of CPU to inflate, hash and scan for imports.
    config = config_for(tmp_path)
    config = config.model_copy(update={"limits": config.limits.model_copy(update={"max_package_ratio": 1_000_000})})
    running = Running(config)
    try:
        package = bomb("tar.zst", 1000 * MiB, "slow.py")
        admit(running, bomb("tar.zst", 1 * MiB), dry_run=True)  # the server warmed up
        settled = settled_cpu()
        begun = time.monotonic()
        with pytest.raises(grpc.RpcError) as raised:
            admit(running, package, timeout=0.3)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - begun < 10
        # The server stopped when the deadline passed, not when the package was read.
        spent = settled_cpu() - settled
        assert spent < 1.5, f"the server spent {spent:.2f} s of CPU on a call with a 0.3 s deadline"
        assert list(running.jobs.ListJobs(jobs_pb2.ListJobsRequest(), metadata=running.auth).jobs) == []
    finally:
        running.close()
