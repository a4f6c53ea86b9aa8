"""`jobgate revalidate` over generated archives of 2 KB JobSpecs (10% failing) at
10,000, 100,000 and 1,000,000 items, against the floor a user could write instead:
a plain loop over jobgate's own API (`os.walk`, read every file, one
`Validator.check_many`), measured in the same rounds. Every run is a whole command in
a process of its own: items/s, and its peak RSS (from `wait4`, the process alone).

Measured: every output format, `--cache` (the run that fills it and the run answered
from it), `--against` (every item judged twice), `--engine ray` (a Ray cluster
started for the benchmark, joined with `--address`; the driver's peak RSS from
`wait4`, and sampled from /proc with and without the pages of Ray's object store, a
shared memory every process that touches an object keeps resident; the workers'
likewise) and `jobgate jobs audit` over a store of as
many unfinished jobs. Mixed archives are measured apart: YAML documents against the
same plain loop, job packages against a plain loop of `Validator.check(package=)`.
Then, as before, the `--cache` second run over 20,000 items (half job packages)
against the first.

Targets (SPEC §8): at 100,000 items, every format and engine at least 0.5x the plain
loop's items/s; peak RSS at 1,000,000 items at most 1.5x the peak at 10,000, for every
format and engine, `--cache`, `--against` and `jobs audit`; the cached second run at
least 5x faster than the first. `--quick` stops at 100,000 items (the memory target
is then checked at 100,000) and runs fewer rounds.

The archives and stores are generated under $JOBGATE_BENCH_DIR (default: the system's
temporary directory) when it has room, and removed afterwards.

    python -m benchmarks revalidation [--quick]
    python -m benchmarks.revalidation [--quick] [--ray-only] [--sizes=10000,1000000]
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import jobgate
from benchmarks import documents, print_grouped, run_alone

SIZES = (10_000, 100_000, 1_000_000)
FORMATS = ("json", "text", "jsonl", "sarif", "junit", "github")
CACHE_ITEMS = 20_000
MIXED_ITEMS = 10_000
# The candidate of `--against` and `jobs audit`: the failing tenth of the archive
# (a wrong `kind`) now only warned about, so a tenth of the items change.
CANDIDATE = '[rules]\n"forge.kind" = "warning"\n'

# The floor: what a user could write with jobgate's API instead of the command.
PLAIN_LOOP = """
import os, sys
import jobgate
validator = jobgate.Validator()
documents = []
for directory, _, names in os.walk(sys.argv[1]):
    for name in names:
        with open(os.path.join(directory, name), "rb") as f:
            documents.append(f.read())
reports = validator.check_many(documents)
print(len(reports), sum(not r.ok for r in reports))
"""

# The floor of job packages: one `check(package=)` per archive, as the API offers it.
PLAIN_PACKAGE_LOOP = """
import os, sys
import jobgate
validator = jobgate.Validator()
failed = 0
for directory, _, names in os.walk(sys.argv[1]):
    for name in names:
        failed += not validator.check(None, package=os.path.join(directory, name)).ok
print(failed)
"""

# `--engine ray` joining a cluster up before the run (what a platform team that
# revalidates archives has), and starting a private one of its own (no `--address`).
RAY_RUNNING = "revalidate --engine ray (cluster running)"
RAY_PRIVATE = "revalidate --engine ray (private cluster)"

# `python -m benchmarks.revalidation --ray-only`: the plain loop and the Ray engine
# alone, at every size (the other rows take most of a whole run's time).
RAY_ONLY = False
# `--sizes=10000,1000000`: those sizes alone (the memory target reads the largest
# against 10,000 when both are run).
ONLY_SIZES: tuple[int, ...] = ()

STARTED = time.monotonic()


def log(message: str) -> None:
    """Where a long benchmark stands, on stderr."""
    print(f"  [{time.monotonic() - STARTED:6.1f} s] {message}", file=sys.stderr, flush=True)


# Ray's token authentication on, with a token of the benchmark's own: a cluster and its
# drivers otherwise take whatever `~/.ray/auth_token` and the environment hold.
ENV = {"CI": "1", "PATH": "/usr/bin:/bin", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


def jobspecs(root: Path, n: int) -> None:
    """`n` 2 KB JobSpecs, one in ten failing (a wrong `kind`), a thousand a directory."""
    doc = json.loads(documents.jobspec())
    good = json.dumps(doc).encode()
    bad = json.dumps({**doc, "kind": "TrainingJobs"}).encode()
    for i in range(n):
        folder = root / f"{i // 1000:04d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True)
        (folder / f"{i:07d}.json").write_bytes(bad if i % 10 == 0 else good)


def yaml_documents(root: Path, n: int) -> None:
    """`n` YAML spec-bundles (the samples), one in ten failing."""
    samples = Path(jobgate.__file__).parent / "samples"
    good, bad = (samples / "spec_bundle.valid.yaml").read_bytes(), (samples / "spec_bundle.rejected.yaml").read_bytes()
    for i in range(n):
        folder = root / f"{i // 1000:04d}"
        if i % 1000 == 0:
            folder.mkdir(parents=True)
        (folder / f"{i:07d}.yaml").write_bytes(bad if i % 10 == 0 else good)


def packages(root: Path, n: int, *, documents_between: bool = False) -> None:
    """`n` job packages as an archive holds them (a tar.gz of a spec-bundle and its two
    helpers, 64 KiB in all), one in ten with a helper changed after it was declared;
    with `documents_between`, every other item is a JobSpec instead (the archive of
    the `--cache` benchmark)."""
    js = json.loads(documents.jobspec())
    helpers = {"scripts/prepare.py": b"import os\n" + os.urandom(16 << 10).hex().encode(), "scripts/model.bin": os.urandom(32 << 10)}
    sb = json.loads(documents.spec_bundle())
    sb.setdefault("execution", {})["supporting_files"] = [{"source": s, "destination": s.split("/")[-1], "sha256": hashlib.sha256(d).hexdigest()} for s, d in helpers.items()]
    for i in range(n):
        folder = root / f"{i // 1000:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        if documents_between and i % 2:
            doc = {**js, "metadata": {**js["metadata"], "name": f"job-{i}"}}
            if i % 97 == 1:
                doc["kind_of"] = "unknown field"  # a warning here and there
            (folder / f"{i:06d}.json").write_text(json.dumps(doc))
            continue
        members = {"bundle.json": json.dumps({**sb, "action": f"train{i}"}).encode(), **helpers}
        if not documents_between and i % 10 == 0:
            members["scripts/prepare.py"] = b"changed after it was declared"
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        (folder / f"{i:06d}.tar.gz").write_bytes(buf.getvalue())


def store_of(path: Path, n: int) -> None:
    """A job store holding `n` unfinished jobs, whose admitted documents are the
    archive's (one in ten with a wrong `kind`), written through the store's API."""
    from jobgate.store import open_store
    from jobgate.store.base import NewJob

    doc = json.loads(documents.jobspec())
    good = json.dumps(doc).encode()
    bad = json.dumps({**doc, "kind": "TrainingJobs"}).encode()
    store = open_store(str(path))
    try:
        for start in range(0, n, 1000):
            group = [
                (NewJob(id_prefix="job", project="my-lab", owner="bench", gpus=1, image="nvcr.io/x:1", network_arch="llm", action="train", platform="slurm", storage_tier="standard", results_root="/results", document=bad if i % 10 == 0 else good, reads_usage=False), lambda _: True)
                for i in range(start, min(n, start + 1000))
            ]
            store.admit_many(group)
    finally:
        store.close()


class Resident:
    """The memory of a Ray run, sampled from /proc every 100 ms while it lasts: the
    processes under each `(root, wanted)` pair (`wanted` picks them by command line;
    the driver's, the workers' of the cluster), their proportional set sizes summed
    at each sample (`peak_pss`: a page shared by several processes, such as the pages
    of Ray's object store every process reading or writing an object keeps mapped, is
    split between them, so it is counted once, not once per process); the largest
    resident set of one worker (`worker_rss`) and the most of the object store's
    shared memory one process kept resident (`shared`). Ray's workers are started for
    each job and leave with it, so they cannot be asked afterwards."""

    def __init__(self, *groups) -> None:
        self.groups = groups
        self.peak_pss = self.worker_rss = self.shared = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop(self) -> Resident:
        self._stop.set()
        self._thread.join()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            total = 0
            for root, wanted in self.groups:
                for pid in _descendants(root):
                    try:
                        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
                        if not wanted(argv):
                            continue
                        rollup = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:] if ":" in line)
                        status = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
                    except OSError:
                        continue
                    total += int(rollup.get("Pss", "0 kB").split()[0]) << 10
                    if ray_worker(argv):
                        self.worker_rss = max(self.worker_rss, int(rollup.get("Rss", "0 kB").split()[0]) << 10)
                    self.shared = max(self.shared, int(status.get("RssShmem", "0 kB").split()[0]) << 10)
            self.peak_pss = max(self.peak_pss, total)


def any_process(argv: list[bytes]) -> bool:
    return True


def ray_worker(argv: list[bytes]) -> bool:
    return argv[0].startswith(b"ray::") and argv[0] not in (b"ray::DashboardAgent", b"ray::RuntimeEnvAgent")


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


# A process's peak RSS as the kernel keeps it (ru_maxrss) starts from the RSS of the
# process that forked it: the benchmark's own. So each command is started by this
# launcher, an interpreter without site (a few MB), which forks it and writes the
# command's own ru_maxrss.
LAUNCHER = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def command(argv: list[str], out: Path, *, ray_head_pid: int | None = None, ray_private: bool = False) -> dict:
    """Runs `argv` with stdout to `out`: its `seconds`, its own peak RSS in bytes
    (`rss`) and its exit `code`; for a Ray run, also its memory sampled (`Resident`):
    with `ray_head_pid`, the driver and the workers the cluster under that pid starts
    for it; with `ray_private`, everything the run starts (the cluster with it)."""
    rss_file = out.with_name("maxrss")
    with open(out, "wb") as stdout, tempfile.TemporaryFile() as stderr:
        t = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-S", "-c", LAUNCHER, str(rss_file), *argv], stdout=stdout, stderr=stderr, env=ENV)
        sampled = None
        if ray_head_pid is not None:
            sampled = Resident((proc.pid, any_process), (ray_head_pid, ray_worker))
        elif ray_private:
            sampled = Resident((proc.pid, any_process))
        code = proc.wait()
        seconds = time.perf_counter() - t
        if code not in (0, 1):
            stderr.seek(0)
            raise RuntimeError(f"{' '.join(argv[:6])}... exited {code}: {stderr.read().decode()[-2000:]}")
    got = {"seconds": seconds, "rss": int(rss_file.read_text()) * 1024, "code": code}
    if sampled is not None:
        sampled.stop()
        got["pss"], got["worker_rss"], got["shared"] = sampled.peak_pss, sampled.worker_rss, sampled.shared
    return got


def jobgate_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "jobgate.cli", *args]


# The object store of the benchmark's cluster: bounded, so that what it may keep
# resident is known (Ray's default is 30% of the machine's memory), and printed.
OBJECT_STORE_BYTES = 256 << 20


@contextlib.contextmanager
def ray_head() -> Iterator[tuple[str, int] | None]:
    """A Ray cluster of this machine's cores for the benchmark (`jobgate.ray_head`),
    up before the first run and joined with `--address` by every `--engine ray` run
    that measures a running cluster. None when Ray is not installed."""
    if importlib.util.find_spec("ray") is None:
        yield None
        return
    from jobgate.ray_head import ray_head as start

    temp = tempfile.mkdtemp(prefix="jg-ray-")  # short: Ray's socket paths must fit 107 bytes
    try:
        with start(temp, object_store_bytes=OBJECT_STORE_BYTES, env=ENV) as head:
            yield head.address, head.pid
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def room_for(base: Path, n: int) -> str | None:
    """Why `n` items (archive, store, outputs) do not fit under `base`, or None."""
    usage = shutil.disk_usage(base)
    need = n * 12 * 1024  # a 2 KB file takes a 4 KiB block; the store about as much again; the outputs, the cache
    inodes = os.statvfs(base).f_favail
    if usage.free < need:
        return f"{n:,} items need about {need >> 30} GiB under {base}, {usage.free >> 30} GiB free"
    if inodes < 2 * n:
        return f"{n:,} items need {2 * n:,} inodes under {base}, {inodes:,} free"
    return None


def median_row(bench: str, impl: str, n: int, samples: list[dict], floor: list[dict] | None) -> dict:
    seconds = statistics.median(s["seconds"] for s in samples)
    row = {"bench": bench, "impl": impl, "items": n, "seconds": seconds, "items_per_s": n / seconds, "rss": max(s["rss"] for s in samples)}
    if floor is not None:
        row["vs_floor"] = statistics.median(f["seconds"] / s["seconds"] for s, f in zip(samples, floor, strict=True))
    return row


def run(quick: bool) -> dict:
    sizes = ONLY_SIZES or (SIZES[:2] if quick else SIZES)
    base = Path(tempfile.mkdtemp(prefix="jobgate-revalidation-", dir=os.environ.get("JOBGATE_BENCH_DIR")))
    rows: list[dict] = []
    targets: list[dict] = []
    notes: list[str] = []
    peaks: dict[str, dict[int, int]] = {}
    try:
        candidate = base / "candidate.toml"
        candidate.write_text(CANDIDATE)
        out = base / "out"
        log("starting a Ray cluster")
        with ray_head() as ray:
            log("Ray cluster up" if ray is not None else "no Ray")
            if ray is None:
                notes.append("Ray is not installed (pip install 'jobgate[ray]'): --engine ray not measured")
            for n in sizes:
                why = room_for(base, n)
                if why:
                    notes.append(f"{n:,} items skipped: {why}")
                    continue
                root, store = base / f"archive-{n}", base / f"store-{n}"
                log(f"generating {n:,} JobSpecs and a store of {n:,} jobs under {base}")
                jobspecs(root, n)
                if RAY_ONLY:
                    store.mkdir()
                else:
                    store_of(store, n)
                runs: dict[str, list[str]] = {"plain loop (os.walk, read, check_many)": [sys.executable, "-c", PLAIN_LOOP, str(root)]}
                if not RAY_ONLY:
                    for fmt in FORMATS:
                        runs[f"revalidate --format {fmt}"] = jobgate_cli("revalidate", str(root), "--format", fmt)
                    runs["revalidate --cache (first run, fills it)"] = jobgate_cli("revalidate", str(root), "--format", "json", "--cache", str(base / "cache.sqlite"))
                    runs["revalidate --cache (second run, from it)"] = runs["revalidate --cache (first run, fills it)"]
                    runs["revalidate --against (two judgments)"] = jobgate_cli("revalidate", str(root), "--format", "json", "--against", str(candidate))
                if ray is not None:
                    runs[RAY_RUNNING] = jobgate_cli("revalidate", str(root), "--format", "json", "--engine", "ray", "--address", ray[0])
                    runs[RAY_PRIVATE] = jobgate_cli("revalidate", str(root), "--format", "json", "--engine", "ray")
                if not RAY_ONLY:
                    runs["jobs audit (a store of as many jobs)"] = jobgate_cli("jobs", "audit", "--store", str(store), "--against", str(candidate), "--format", "json")
                rounds = 1 if n >= 1_000_000 or (quick and n >= 100_000) else 2 if quick else 3
                samples: dict[str, list[dict]] = {name: [] for name in runs}
                for _ in range(rounds):
                    fresh_cache(base / "cache.sqlite")
                    for name, argv in runs.items():
                        got = command(argv, out, ray_head_pid=ray[1] if name == RAY_RUNNING else None, ray_private=name == RAY_PRIVATE)
                        samples[name].append(got)
                        pss = f", PSS summed {got['pss'] >> 20} MB, store pages {got['shared'] >> 20} MB" if "pss" in got else ""
                        log(f"{n:,} items, {name}: {got['seconds']:.2f} s, {got['rss'] >> 20} MB{pss}")
                        check_output(name, out, n, got["code"])
                    out.unlink()
                fresh_cache(base / "cache.sqlite")
                log("removing the archive and the store")
                shutil.rmtree(root)
                shutil.rmtree(store)
                bench = f"{n:,} JobSpecs, 2 KB, 10% failing (whole commands; median of {rounds} round{'s' * (rounds > 1)})"
                floor = samples["plain loop (os.walk, read, check_many)"]
                for name, got in samples.items():
                    rows.append(median_row(bench, name, n, got, floor))
                    peaks.setdefault(name, {})[n] = max(g["rss"] for g in got)
                for name in (RAY_RUNNING, RAY_PRIVATE):
                    ray_runs = samples.get(name, [])
                    if not ray_runs:
                        continue
                    what = "driver + workers" if name == RAY_RUNNING else "driver + the cluster it starts + workers"
                    pss = f"{name.removeprefix('revalidate ')}: {what}, PSS summed"
                    rows.append({"bench": bench, "impl": pss, "items": n, "rss": max(g["pss"] for g in ray_runs), "shared": max(g["shared"] for g in ray_runs)})
                    peaks.setdefault(pss, {})[n] = max(g["pss"] for g in ray_runs)
                if n == 100_000:
                    for name in samples:
                        if name.startswith("revalidate --format") or name == RAY_RUNNING:
                            r = next(row["vs_floor"] for row in rows if row["bench"] == bench and row["impl"] == name)
                            targets.append({"target": f"{name.removeprefix('revalidate ')}: >= 0.5x the plain loop's items/s at 100k", "ratio": r, "goal": 0.5, "ok": r >= 0.5, "how": "median per-round plain-loop time / command time, whole commands"})
            log("stopping the Ray cluster")
            top = max((n for n in sizes if any(n in p for p in peaks.values())), default=None)
            if top is not None and top > SIZES[0]:
                for name, by_size in peaks.items():
                    # A Ray driver's own peak RSS counts the object store's pages it touched, which
                    # the store bounds and every process of the job shares: its row says PSS.
                    if name.startswith("plain loop") or name in (RAY_RUNNING, RAY_PRIVATE) or SIZES[0] not in by_size or top not in by_size:
                        continue
                    r = by_size[top] / by_size[SIZES[0]]
                    measure = "peak PSS" if "PSS" in name else "peak RSS"
                    targets.append({"target": f"{name.removeprefix('revalidate ')}: {measure} at {top // 1000:,}k <= 1.5x at 10k", "ratio": r, "goal": 1.5, "ok": r <= 1.5, "how": f"{measure} at {top:,} items / at 10,000 ({by_size[top] >> 20} MB / {by_size[SIZES[0]] >> 20} MB)"})
        if not RAY_ONLY:
            log("mixed archives")
            mixed(base, rows, quick)
            log("--cache, second run against the first")
            cached(base, rows, targets, quick)
        log("done")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return {"rows": rows, "targets": targets, "notes": notes}


def fresh_cache(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def check_output(name: str, out: Path, n: int, code: int) -> None:
    """The run reported what it should: every item, a tenth failing (or changing)."""
    if name.startswith("plain loop"):
        assert out.read_text().split() == [str(n), str(n // 10)], out.read_text()
        return
    with open(out, "rb") as f:
        f.seek(max(0, f.seek(0, 2) - 4096))
        tail = f.read().decode(errors="replace")
    if "--against" in name or "audit" in name:
        assert code == 0 and f'"items": {n},' in tail and f'"changed": {n // 10},' in tail, tail
    elif name.endswith("--format json") or "--cache" in name or "ray" in name:
        assert code == 1 and f'"total": {n},' in tail and f'"failed": {n // 10},' in tail, tail
    else:
        assert code == 1, (name, code)


def mixed(base: Path, rows: list[dict], quick: bool) -> None:
    """YAML documents and job packages, each against its plain loop, reported apart."""
    n = MIXED_ITEMS // (5 if quick else 1)
    rounds = 2 if quick else 3
    out = base / "out"
    for what, make, loop, count in (("YAML spec-bundles, 0.4-0.7 KB", yaml_documents, PLAIN_LOOP, n), ("job packages, tar.gz of 64 KiB", packages, PLAIN_PACKAGE_LOOP, n // 5)):
        root = base / "mixed"
        make(root, count)
        samples: dict[str, list[dict]] = {"plain loop": [], "revalidate --format json": []}
        for _ in range(rounds):
            samples["plain loop"].append(command([sys.executable, "-c", loop, str(root)], out))
            samples["revalidate --format json"].append(command(jobgate_cli("revalidate", str(root), "--format", "json"), out))
        shutil.rmtree(root)
        bench = f"{count:,} {what}, 10% failing (median of {rounds} rounds)"
        for name, got in samples.items():
            rows.append(median_row(bench, name, count, got, samples["plain loop"]))


def cached(base: Path, rows: list[dict], targets: list[dict], quick: bool) -> None:
    """`--cache`: the second run over an unchanged archive (half job packages) against
    the first (which checks every item and fills the cache)."""
    n = 4_000 if quick else CACHE_ITEMS
    rounds = 2 if quick else 3
    root = base / "cache-archive"
    packages(root, n, documents_between=True)
    firsts, seconds = [], []
    for r in range(rounds):
        cache = str(base / f"cache-{r}.sqlite")
        firsts.append(command(jobgate_cli("revalidate", str(root), "--format", "json", "--cache", cache), base / "out"))
        seconds.append(command(jobgate_cli("revalidate", str(root), "--format", "json", "--cache", cache), base / "out"))
    shutil.rmtree(root)
    ratio = statistics.median(a["seconds"] / b["seconds"] for a, b in zip(firsts, seconds, strict=True))
    bench = f"revalidate {n:,} items (half job packages) with --cache (median of {rounds} pairs of runs)"
    rows.append(median_row(bench, "first run (checks every item, fills the cache)", n, firsts, None))
    rows.append(median_row(bench, "second run (reads every item, checks none)", n, seconds, None))
    targets.append({"target": "revalidate --cache: second run >= 5x faster", "ratio": ratio, "goal": 5, "ok": ratio >= 5, "how": "median per-round first-run time / second-run time, whole commands"})


def print_table(result: dict) -> None:
    def line(r: dict, first: dict) -> str:
        rate = f"{r['items_per_s']:>10,.0f} items/s" if "items_per_s" in r else " " * 18
        versus = f"{r['vs_floor']:6.2f}x floor" if "vs_floor" in r else " " * 12
        if "shared" in r:  # a Ray run's memory, every process of it at once
            return f"  {r['impl']:<77} peak PSS {r['rss'] / (1 << 20):7.1f} MB (object store pages resident, one process at most: {r['shared'] / (1 << 20):.1f} MB)"
        return f"  {r['impl']:<46} {rate} {versus}   peak RSS {r['rss'] / (1 << 20):7.1f} MB"

    print_grouped(result["rows"], line, str)
    for note in result.get("notes", []):
        print(f"  note: {note}")
    if any("shared" in r for r in result["rows"]):
        print(f"  note: the Ray cluster running for the benchmark has an object store of {OBJECT_STORE_BYTES >> 20} MiB; a private one, Ray's default for `ray.init`")


if __name__ == "__main__":
    RAY_ONLY = "--ray-only" in sys.argv
    ONLY_SIZES = tuple(int(n) for a in sys.argv if a.startswith("--sizes=") for n in a.removeprefix("--sizes=").split(","))
    run_alone(run, print_table, sys.argv)
