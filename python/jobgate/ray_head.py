"""A Ray cluster on this machine, started as an operator starts one (`ray start --head
--block`) and kept up for a block, so that several `jobgate revalidate --engine ray
--address ...` runs join the same cluster (the tests, the benchmarks). It is stopped
by terminating that one process, which stops its cluster and no other: never `ray
stop`, which stops every Ray on the machine.

Owns starting and stopping a local head; needs Ray (`jobgate[ray]`).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple


class RayHead(NamedTuple):
    address: str  # host:port, for `--address`
    pid: int  # the `ray start --block` process; the cluster's processes are its descendants
    log: Path  # what `ray start` printed


@contextmanager
def ray_head(
    temp_dir: str | Path,
    *,
    num_cpus: int | None = None,
    object_store_bytes: int | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> Iterator[RayHead]:
    """A head node on a free port of 127.0.0.1, its session under `temp_dir` (short:
    Ray's socket paths must fit in 107 bytes), with `num_cpus` CPUs (default: Ray's
    count) and an object store of `object_store_bytes` (default: Ray's, 30% of the
    memory); started with `env` (default: this process's), whose PATH is given the
    directory of this interpreter's `ray` first. Raises RuntimeError when it does not
    come up within `timeout` seconds, FileNotFoundError without Ray."""
    bin_dir = Path(sys.executable).parent
    ray = shutil.which("ray", path=str(bin_dir))
    if ray is None:
        raise FileNotFoundError(f"no `ray` beside {sys.executable}: pip install 'jobgate[ray]'")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    temp = Path(temp_dir)
    temp.mkdir(parents=True, exist_ok=True)
    log = temp / "ray-start.log"
    argv = [ray, "start", "--head", f"--port={port}", "--include-dashboard=false", f"--temp-dir={temp}", "--block"]
    if num_cpus is not None:
        argv.append(f"--num-cpus={num_cpus}")
    if object_store_bytes is not None:
        argv.append(f"--object-store-memory={object_store_bytes}")
    environment = dict(env if env is not None else os.environ)
    environment["PATH"] = f"{bin_dir}:{environment.get('PATH', '')}"
    with open(log, "wb") as out:
        head = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=environment)
    try:
        deadline = time.monotonic() + timeout
        while b"will now block" not in log.read_bytes():
            if head.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"ray start failed: {log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield RayHead(f"127.0.0.1:{port}", head.pid, log)
    finally:
        head.terminate()
        try:
            head.wait(120)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
