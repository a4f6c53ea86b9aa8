"""Batch revalidation of archived documents and job packages against the current
configuration, streamed: the items are found as the walk reaches them, cut into
chunks, judged a bounded number of chunks at a time, and handed back chunk by chunk
in the order they were found. Nothing holds the whole archive: memory depends on the
chunk size and the number of chunks in flight, not on how many items there are.

Order: named paths in the order given; a directory depth first, the entries of each
directory sorted by name (as text). So two runs over the same archive report the same
items in the same order, whichever chunk finishes first.

Two engines judge chunks:

- `local`: a thread pool on this machine. A chunk's documents are read and checked
  by the core in one call with the GIL released (`Validator.check_paths`), so the
  pool uses every core and no Python object is made for a file's bytes;
- `ray`: one Ray task per chunk on a Ray cluster. The workers read their items at
  their paths, as the local engine does, when they see this machine's files (the
  cluster is this machine alone); otherwise the driver reads the items and ships
  their bytes, so the cluster needs no filesystem in common with it, and a chunk is
  cut by count and by the bytes read for it (`run_ray`).

With a `ReportCache`, items whose bytes, configuration and jobgate version are
unchanged since a run that checked them are not checked again.

Owns finding, chunking and judging items; must not format reports (`jobgate.cli`).
"""

from __future__ import annotations

import io
import itertools
import os
import queue
import socket
import sqlite3
import tarfile
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NamedTuple

import orjson

import jobgate
from jobgate import _core, sources
from jobgate.config import Config, Limits
from jobgate.reports import ReportView, renamed

BUNDLE_NAMES = ("bundle.json", "bundle.yaml", "bundle.yml")  # where a package holds its bundle (rust/src/files/package.rs)

PACKAGE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".zip")
_SUFFIXES = PACKAGE_SUFFIXES + sources.DOCUMENT_SUFFIXES
# A local chunk: enough items that handing it to a thread costs little beside
# checking it, few enough that the chunks in flight stay small. Its documents are read
# one at a time by the core, so its bytes are never held together.
CHUNK_ITEMS = 128
# A Ray task costs its driver about 5 ms to submit and collect (measured on 2 cores):
# its chunk is larger, 30 ms of checking at 2 KB an item, and bounded in bytes, since
# when the driver reads the items their bytes are shipped together.
RAY_CHUNK_ITEMS = 4096
CHUNK_BYTES = 32 << 20
# Bumped whenever a report holds something new (2: each violation's line and column),
# so that a cache filled before never answers with the old shape.
REPORT_SHAPE = 2


class Item(NamedTuple):
    """One thing to revalidate: a document file, or a package (its own bundle and its
    supporting files) as an archive or, `unpacked`, as a directory. `unlisted` says
    why a directory found inside a named one could not be listed: it is reported as a
    failed item, as an unreadable file is."""

    path: str
    package: bool = False
    unpacked: bool = False
    unlisted: str | None = None


def is_package(path: Path) -> bool:
    return path.name.lower().endswith(PACKAGE_SUFFIXES)


def discover(paths: list[str]) -> Iterator[Item]:
    """The items, found lazily as they are taken. Files as given (archives are
    packages, anything else a document); directories become their documents and
    packages (`walk`). A directory with a `bundle.json` (or `.yaml`, `.yml`) at its
    top is one package, not a folder of documents. Only regular files are items: a
    FIFO, socket or device named is refused (`sources.NotRegular`), one met in a
    directory is passed over, as `check` does.

    Every named path is looked at before this returns, so a command that cannot run
    fails before anything is reported: FileNotFoundError names a path that does not
    exist, or a named directory that cannot be listed or holds nothing to revalidate
    (each is walked to its first item, no further)."""
    walks: list[Iterable[Item]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            top = str(p)
            found = walk(top)
            first = next(found, None)
            if first is None:
                raise FileNotFoundError(f"{raw}: the directory holds no documents (.json, .yaml, .yml) or packages ({', '.join(PACKAGE_SUFFIXES)}, or a directory with a bundle.json)")
            if first.unlisted is not None and first.path == top:
                raise FileNotFoundError(first.unlisted)
            walks.append(itertools.chain((first,), found))
        elif p.exists():
            sources.ensure_regular(raw)
            walks.append((Item(raw, is_package(p)),))
        else:
            raise FileNotFoundError(f"{raw}: no such file or directory")
    return itertools.chain.from_iterable(walks)


def walk(top: str) -> Iterator[Item]:
    """The items under `top`, depth first, each directory's entries sorted by name;
    symlinked directories are not entered (no loops). One directory's listing is held
    at a time per level (names only), never the tree's; an explicit stack, so no
    depth is too deep."""
    stack: list[Iterator[tuple[str, bool]]] = [iter(((top, True),))]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        path, is_directory = entry
        if not is_directory:
            yield Item(path, path.lower().endswith(PACKAGE_SUFFIXES))
            continue
        listed = _listing(path)
        if isinstance(listed, Item):
            yield listed
        else:
            stack.append(iter(listed))


def _listing(directory: str) -> list[tuple[str, bool]] | Item:
    """A directory's subdirectories and candidate files as `(path, is_directory)`,
    sorted by name; or the directory as one item: an unpacked package (a bundle at its
    top), or one that cannot be listed. The walk's own dirents say what each entry is
    (no `stat` where the filesystem tells the type)."""
    kept: list[tuple[str, bool]] = []
    bundle = False
    try:
        with os.scandir(directory) as listing:
            for e in listing:
                name = e.name
                if e.is_dir(follow_symlinks=False):
                    kept.append((name, True))
                elif name.lower().endswith(_SUFFIXES) and e.is_file():
                    kept.append((name, False))
                    bundle = bundle or name in BUNDLE_NAMES
                elif name in BUNDLE_NAMES and e.is_file():
                    bundle = True
    except OSError as e:
        return Item(directory, unlisted=f"{directory}: cannot list: {e.strerror or e}")
    if bundle:
        return Item(directory, True, unpacked=True)
    kept.sort()
    return [(os.path.join(directory, name), is_directory) for name, is_directory in kept]


def chunks(items: Iterable[Item], size: int) -> Iterator[list[Item]]:
    """Consecutive runs of `size` items (the last may be shorter), taken lazily."""
    found = iter(items)
    while chunk := list(itertools.islice(found, size)):
        yield chunk


class PackageTooLarge(ValueError):
    """An unpacked package whose files hold more than `limits.max_package_bytes`,
    refused before it is packed. The message and the report are the core's
    (`limits.size`)."""

    def __init__(self, directory: str, size: int, limit: int) -> None:
        self.directory = directory
        self.size = size
        self.limit = limit
        super().__init__(_core.refused_package_too_large(directory, size, limit).violations[0].message)

    def report(self, kind: str | None) -> dict[str, Any]:
        return _core.refused_package_too_large(self.directory, self.size, self.limit, kind=kind).to_dict()


def pack(directory: str, limit: int) -> bytes:
    """An unpacked package as the tar archive it would have been (members in path
    order, links and special files as they are, never followed), so it is verified
    exactly as its archive is. Raises PackageTooLarge past `limit` bytes of content."""
    root = Path(directory)
    members = sorted(root.rglob("*"))
    total = sum(m.lstat().st_size for m in members if m.is_file() and not m.is_symlink())
    if total > limit:
        raise PackageTooLarge(directory, total, limit)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for member in members:
            tar.add(member, arcname=member.relative_to(root).as_posix(), recursive=False)
    return buffer.getvalue()


# An item as a Ray chunk ships it: a document's bytes, a package as its name and bytes,
# or the report refusing it (`Report.to_dict()` shape) when it could not be read.
Payload = bytes | tuple[str, bytes] | dict[str, Any]


def _unreadable(reason: str, kind: str | None) -> dict[str, Any]:
    return _core.refused_unreadable(reason, kind=kind).to_dict()


def package_payload(item: Item, limits: Limits, kind: str | None) -> Payload:
    """A package's name and bytes to ship (an unpacked one packed first), or the
    report refusing the item: an unpacked package over the size limit is refused
    unpacked; an item that cannot be read gets the report the core gives it, for
    documents of `kind`."""
    if item.unlisted is not None:
        return _unreadable(item.unlisted, kind)
    try:
        if item.unpacked:
            return item.path, pack(item.path, limits.max_package_bytes)
        with sources.open_regular(item.path) as f:
            return item.path, f.read()
    except PackageTooLarge as e:
        return e.report(kind)
    except sources.NotRegular as e:  # replaced by a FIFO or socket since it was found
        return _unreadable(str(e), kind)
    except OSError as e:  # as the core words it (`files::documents`)
        return _unreadable(f"cannot read {item.path}: {e.strerror or e}", kind)
    except ValueError as e:  # a name the system cannot encode, say
        return _unreadable(f"cannot read {item.path}: {e}", kind)


def payloads(items: list[Item], limits: Limits, kind: str | None) -> list[Payload]:
    """What a Ray chunk ships for `items`: the documents read by the core in one call
    (GIL released), packages read whole."""
    documents = [i for i, item in enumerate(items) if not item.package and item.unlisted is None]
    out: list[Any] = [None] * len(items)
    read = _core.read_documents([items[i].path for i in documents], limits.max_document_bytes, kind=kind) if documents else []
    for i, data in zip(documents, read, strict=True):
        out[i] = data if isinstance(data, bytes) else data.to_dict()
    for i, item in enumerate(items):
        if out[i] is None:
            out[i] = package_payload(item, limits, kind)
    return out


def check_package(validator: jobgate.Validator, source: str, data: bytes, kind: str | None) -> dict[str, Any]:
    """A package's report from its bytes (`Report.to_dict()` shape), verified from a
    private temporary copy that messages name as the package."""
    with sources.spooled(data) as path:
        return renamed(validator.check(None, kind=kind, package=path).to_dict(), path, source)


def check_items(validator: jobgate.Validator, items: list[Item], kind: str | None, limits: Limits) -> list[Any]:
    """The reports of items on this machine, in their order: `jobgate.Report`s, or
    `ReportView`s where a report was rewritten. The documents are read and checked
    together by the core (`check_paths`, on this thread); a package is verified where
    it lies, an unpacked one from the archive it packs to."""
    reports: list[Any] = [None] * len(items)
    documents = [i for i, item in enumerate(items) if not item.package and item.unlisted is None]
    if documents:
        checked = validator.check_paths([items[i].path for i in documents], kind, threads=1)
        for i, report in zip(documents, checked, strict=True):
            reports[i] = report
    for i, item in enumerate(items):
        if item.package and not item.unpacked:
            reports[i] = validator.check(None, kind=kind, package=item.path)
        elif reports[i] is None:
            shipped = package_payload(item, limits, kind)
            reports[i] = ReportView.from_dict(shipped if isinstance(shipped, dict) else check_package(validator, *shipped, kind))
    return reports


class EngineError(Exception):
    """The engine cannot run (Ray missing or unreachable, a task lost); the message
    says why."""


class CacheError(Exception):
    """The report cache file cannot be opened or written; the message says why."""


class ReportCache:
    """Reports of items already revalidated, in a SQLite file, so a rerun over an
    unchanged archive checks nothing again. An item's key is the BLAKE3 hash of its
    name and bytes (an unpacked package: the tar it packs to), salted with what a
    report depends on besides: jobgate's version, the configuration and `--kind`. A
    changed item, configuration or version misses and is checked afresh; a hit is the
    very report the check gave.

    Chunks are judged on several threads at once: each thread looks reports up through
    its own connection, and the file is in WAL mode, so readers never wait for the one
    writer, a thread of the cache's own fed through a short queue: its commits (and
    the flushes of WAL checkpoints) overlap the checking rather than hold up the run. A
    cache is written as it goes; it is a cache, so a crash costs at most the last few
    chunks' reports (`synchronous=NORMAL`)."""

    WRITE_BATCH = 4096  # rows a commit takes

    def __init__(self, path: str, config: Config | None, kind: str | None) -> None:
        shape = str(REPORT_SHAPE)
        self.salt = b"".join(part.encode() + b"\0" for part in (jobgate.__version__, shape, (config or Config()).model_dump_json(), kind or ""))
        self.limits = (config or Config()).limits
        self.path = path
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._rows: queue.Queue[list[tuple[str, str]] | None] = queue.Queue(maxsize=8)
        self._writer: threading.Thread | None = None
        self._failed: CacheError | None = None
        db = self._db()
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS reports (key TEXT PRIMARY KEY, report TEXT NOT NULL)")
            db.commit()
        except sqlite3.Error as e:
            self.close()
            raise CacheError(f"{path}: cannot use it as a revalidation cache: {e}") from None

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            try:
                db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
                db.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as e:
                raise CacheError(f"{self.path}: cannot use it as a revalidation cache: {e}") from None
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    def close(self) -> None:
        """Waits for the writer to commit what it was given, then closes every
        connection. Raises CacheError when a write failed."""
        try:
            self.flush()
        finally:
            with self._lock:
                for db in self._connections:
                    db.close()
                self._connections.clear()

    def flush(self) -> None:
        """Returns once every row handed to `write` is committed; raises CacheError
        when a write failed."""
        if self._writer is not None:
            self._rows.put(None)
            self._writer.join()
            self._writer = None
        if self._failed is not None:
            raise self._failed

    def _write_rows(self) -> None:
        """The writer: gathers rows into transactions of WRITE_BATCH (a commit costs
        about as much as a thousand rows), and commits what is left when told to stop."""
        batch: list[tuple[str, str]] = []
        while True:
            rows = self._rows.get()
            if rows is not None:
                batch += rows
                if len(batch) < self.WRITE_BATCH:
                    continue
            if batch and self._failed is None:
                try:
                    db = self._db()
                    with db:
                        db.executemany("INSERT OR REPLACE INTO reports VALUES (?, ?)", batch)
                except (sqlite3.Error, CacheError) as e:
                    self._failed = e if isinstance(e, CacheError) else CacheError(f"{self.path}: cannot write the revalidation cache: {e}")
            batch = []  # after a failure, the rows are drained, so no writer of the queue waits forever
            if rows is None:
                return

    def keys(self, items: list[Item]) -> list[str | None]:
        """Every item's key, or None for one that cannot be read (whoever checks it
        says why). The core reads and hashes the files in one call, with the GIL
        released: keying an archive of small items is all opening and reading."""
        named: list[tuple[str, bytes | None]] = []
        for item in items:
            data = None
            if item.unlisted is not None:
                named.append(("", None))  # an empty name opens nothing: no key
                continue
            if item.unpacked:
                try:
                    data = pack(item.path, self.limits.max_package_bytes)
                except (OSError, ValueError):
                    named.append(("", None))
                    continue
            named.append((item.path, data))
        return _core.content_keys(self.salt, named)

    def keys_of(self, items: list[Item], shipped: list[Payload]) -> list[str | None]:
        """As `keys`, for items whose bytes were read already (`payloads`)."""
        named: list[tuple[str, bytes | None]] = []
        for item, p in zip(items, shipped, strict=True):
            if isinstance(p, bytes):
                named.append((item.path, p))
            elif isinstance(p, tuple):
                named.append(p)
            else:
                named.append(("", None))
        return _core.content_keys(self.salt, named)

    def get(self, keys: list[str | None]) -> dict[str, dict[str, Any]]:
        wanted = [k for k in keys if k is not None]
        found: dict[str, dict[str, Any]] = {}
        try:
            db = self._db()
            for start in range(0, len(wanted), 500):
                batch = wanted[start : start + 500]
                rows = db.execute(f"SELECT key, report FROM reports WHERE key IN ({','.join('?' * len(batch))})", batch)
                found.update((k, orjson.loads(r)) for k, r in rows)
        except (sqlite3.Error, orjson.JSONDecodeError) as e:
            raise CacheError(f"{self.path}: cannot read the revalidation cache: {e}") from None
        return found

    def put(self, reports: dict[str, dict[str, Any]]) -> None:
        self.write([(k, orjson.dumps(r).decode()) for k, r in reports.items()])

    def write(self, rows: list[tuple[str, str]]) -> None:
        """Hands `(key, report as JSON)` rows to the writer; waits only when it is a
        few batches behind. Raises CacheError when an earlier write failed."""
        if self._failed is not None:
            raise self._failed
        if not rows:
            return
        if self._writer is None:
            self._writer = threading.Thread(target=self._write_rows, name="jobgate-cache-writer", daemon=True)
            self._writer.start()
        self._rows.put(rows)


class Judge:
    """One configuration an archive is judged under: its validator, and the cache of
    reports made under it, if any."""

    def __init__(self, config: Config | None, kind: str | None, cache: ReportCache | None = None) -> None:
        self.config = config
        self.kind = kind
        self.limits = (config or Config()).limits
        self.validator = jobgate.Validator(config)
        self.cache = cache

    def reports(self, items: list[Item], check: Callable[[list[Item]], list[Any]]) -> tuple[list[Any], list[tuple[str, str]]]:
        """The items' reports: from the cache where it has them, else from `check`;
        and the rows (key, report as JSON) the cache is to remember of those checked,
        written by whoever takes the chunk (`run_local`), so the cache has one writer."""
        if self.cache is None:
            return check(items), []
        keys = self.cache.keys(items)
        cached = self.cache.get(keys)
        todo = [i for i, k in enumerate(keys) if k not in cached]
        fresh = check([items[i] for i in todo]) if todo else []
        rows = [(k, orjson.dumps(_as_dict(r)).decode()) for k, r in zip((keys[i] for i in todo), fresh, strict=True) if k is not None]
        reports: list[Any] = [ReportView.from_dict(cached[k]) if k in cached else None for k in keys]
        for i, report in zip(todo, fresh, strict=True):
            reports[i] = report
        return reports, rows


def _as_dict(report: Any) -> dict[str, Any]:
    return report if isinstance(report, dict) else report.to_dict()


class Judged(NamedTuple):
    """A chunk judged: its items, and their reports under each configuration, in the
    items' order (`reports[c][i]`: item i under configuration c)."""

    items: list[Item]
    reports: list[list[Any]]


def check_chunk(judge: Judge, items: list[Item]) -> list[Any]:
    """A chunk's reports under one configuration, on this machine (a seam the tests
    count checks at)."""
    return check_items(judge.validator, items, judge.kind, judge.limits)


def run_local(items: Iterable[Item], judges: list[Judge], threads: int | None = None) -> Iterator[Judged]:
    """Chunks judged on a pool of `threads` threads (default: every core), at most
    twice as many chunks in flight as threads; handed back in the items' order as
    they complete (a chunk done early waits for those before it, within the window)."""
    workers = threads or len(os.sched_getaffinity(0))
    window = 2 * workers

    def judge_chunk(chunk: list[Item]) -> tuple[Judged, list[list[tuple[str, str]]]]:
        judged = [judge.reports(chunk, lambda todo, j=judge: check_chunk(j, todo)) for judge in judges]
        return Judged(chunk, [reports for reports, _ in judged]), [rows for _, rows in judged]

    for judged, rows in ordered(chunks(items, CHUNK_ITEMS), judge_chunk, workers, window):
        for judge, fresh in zip(judges, rows, strict=True):
            if judge.cache is not None:
                judge.cache.write(fresh)
        yield judged
    for judge in judges:
        if judge.cache is not None:
            judge.cache.flush()  # a write that failed fails the run before its summary


def ordered(work: Iterable[Any], do: Callable[[Any], Any], workers: int, window: int) -> Iterator[Any]:
    """`do(w)` for every `w` of `work`, on `workers` threads, handed back in `work`'s
    order. At most `window` are taken from `work` and not yet handed back, so neither
    the work found ahead nor the results waiting their turn grow with `work`."""
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jobgate-revalidate") as pool:
        in_flight: deque[Future[Any]] = deque()
        try:
            for w in work:
                if len(in_flight) >= window:
                    yield in_flight.popleft().result()
                in_flight.append(pool.submit(do, w))
            while in_flight:
                yield in_flight.popleft().result()
        finally:
            for f in in_flight:
                f.cancel()


def run_ray(items: Iterable[Item], judges: list[Judge], ray: Any, reads: str = "auto") -> Iterator[Judged]:
    """One Ray task per chunk; at most twice the cluster's CPUs of chunks are taken
    and not yet handed back (in flight, or done and waiting for an earlier one), so
    neither the driver nor the object store holds more than that many chunks. Results
    come back as tasks finish (`ray.wait`) and are handed back in the items' order.
    With caches, only the items some configuration has no report for are sent.

    `reads`: where the items are read. `workers`: a task gets its items' paths and
    reads them as the local engine does (the cluster sees this machine's files at the
    same paths); `driver`: the driver reads them and ships their bytes (the cluster
    needs no filesystem in common with it); `auto`: `workers` when the cluster is this
    machine alone, run by this user (`workers_see_our_files`), else `driver`."""
    if reads == "auto":
        reads = "workers" if workers_see_our_files(ray) else "driver"
    task = ray.remote(_ray_judge_paths if reads == "workers" else _ray_judge).options(num_cpus=1)
    window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
    configs = ray.put([judge.config for judge in judges])
    kind = judges[0].kind
    limits = judges[0].limits
    here = os.getcwd()
    pending: dict[Any, int] = {}  # task -> chunk number
    # chunk number -> its items, what was shipped for them (bytes mode), their cache
    # keys per configuration, their reports so far per configuration, the items sent
    started: dict[int, tuple[list[Item], list[Payload] | None, list[list[str | None] | None], list[list[Any]], list[int]]] = {}
    done: dict[int, list[list[Any]]] = {}
    emitted = 0

    def finish(n: int) -> Judged:
        chunk, _, keys, reports, todo = started.pop(n)
        fresh = done.pop(n)
        for c, judge in enumerate(judges):
            missed: dict[str, dict[str, Any]] = {}
            for j, i in enumerate(todo):
                if reports[c][i] is None:
                    found = fresh[c][j]
                    reports[c][i] = _clean(found) if isinstance(found, str) else ReportView.from_dict(found)
                    key = keys[c][i] if keys[c] is not None else None
                    if key is not None:
                        missed[key] = reports[c][i].to_dict()
            if judge.cache is not None and missed:
                judge.cache.put(missed)
        return Judged(chunk, reports)

    def collect() -> None:
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            n = pending.pop(ref)
            try:
                done[n] = [orjson.loads(reports) for reports in ray.get(ref)]
            except ray.exceptions.RayError as e:  # a worker died, or the task could not run
                first = str(e).splitlines()[0] if str(e) else ""
                raise EngineError(f"a Ray task failed, {len(started[n][0])} items unchecked; the report is incomplete: {type(e).__name__}: {first}") from None

    work = ((chunk, None) for chunk in chunks(items, RAY_CHUNK_ITEMS)) if reads == "workers" else _ray_chunks(items, limits, kind)
    for n, (chunk, shipped) in enumerate(work):
        while len(started) >= window:
            if emitted in done:
                yield finish(emitted)
                emitted += 1
            else:
                collect()
        reports: list[list[Any]] = []
        keys: list[list[str | None] | None] = []
        for judge in judges:
            if judge.cache is None:
                reports.append([None] * len(chunk))
                keys.append(None)
                continue
            found = judge.cache.keys(chunk) if shipped is None else judge.cache.keys_of(chunk, shipped)
            cached = judge.cache.get(found)
            reports.append([ReportView.from_dict(cached[k]) if k in cached else None for k in found])
            keys.append(found)
        todo = [i for i in range(len(chunk)) if any(r[i] is None for r in reports)] if any(keys) else list(range(len(chunk)))
        started[n] = (chunk, shipped, keys, reports, todo)
        if not todo:
            done[n] = [[] for _ in judges]
        elif shipped is None:
            pending[task.remote(configs, packed_items([chunk[i] for i in todo]), kind, here)] = n
        else:
            pending[task.remote(configs, [shipped[i] for i in todo], kind)] = n
    while started:
        if emitted in done:
            yield finish(emitted)
            emitted += 1
        else:
            collect()
    for judge in judges:
        if judge.cache is not None:
            judge.cache.flush()


def workers_see_our_files(ray: Any) -> bool:
    """Whether the cluster's workers read this machine's files as this process does:
    the cluster is one node, the one this driver joined through (so its raylet's
    socket is a file here), and that raylet runs as this user (its workers do too)."""
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    if len(nodes) != 1 or nodes[0].get("NodeID") != ray.get_runtime_context().get_node_id():
        return False
    try:
        return os.stat(nodes[0]["RayletSocketName"]).st_uid == os.getuid()
    except (OSError, KeyError, TypeError):
        return False


_CLEAN: dict[str, ReportView] = {}


def _clean(kind: str) -> ReportView:
    """The passing report without violations of `kind`: one per kind, as the core
    hands out, so a clean item costs no object on its way back from Ray."""
    view = _CLEAN.get(kind)
    if view is None:
        view = _CLEAN[kind] = ReportView(kind, "pass", [])
    return view


def _ray_chunks(items: Iterable[Item], limits: Limits, kind: str | None) -> Iterator[tuple[list[Item], list[Payload]]]:
    """Chunks for Ray as their items are read (a few at a time by the core): cut at
    RAY_CHUNK_ITEMS items or once CHUNK_BYTES have been read for one, whichever comes
    first."""
    chunk: list[Item] = []
    shipped: list[Payload] = []
    size = 0
    for few in chunks(items, min(64, RAY_CHUNK_ITEMS)):
        for item, p in zip(few, payloads(few, limits, kind), strict=True):
            chunk.append(item)
            shipped.append(p)
            size += len(p) if isinstance(p, bytes) else len(p[1]) if isinstance(p, tuple) else 0
            if len(chunk) >= RAY_CHUNK_ITEMS or size >= CHUNK_BYTES:
                yield chunk, shipped
                chunk, shipped, size = [], [], 0
    if chunk:
        yield chunk, shipped


@contextmanager
def ray_session(address: str | None) -> Iterator[Any]:
    """Ray, joined (or a private local one started) for the block, and left after;
    inside another session, that one is used."""
    try:
        import ray
    except ImportError:
        raise EngineError("the ray engine needs Ray: pip install 'jobgate[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        if address and address != "auto":
            reachable(address)
        try:
            # "local" starts a private Ray even when one was started on this machine
            # before (`ray.init()` alone would join that one).
            ray.init(address=address or "local", include_dashboard=False, logging_level="ERROR", log_to_driver=False, configure_logging=False)
        except Exception as e:  # noqa: BLE001 - Ray raises several types for "cannot connect"
            raise EngineError(f"cannot reach the Ray cluster at {address or '(local)'}: {e}") from None
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def reachable(address: str, timeout: float = 5.0) -> None:
    """Raises EngineError unless a TCP connection to the cluster's head opens within
    `timeout` seconds: Ray itself retries an unreachable head for minutes."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise EngineError(f"--address {address!r} is not host:port, ray://host:port or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout).close()
    except OSError as e:
        raise EngineError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


_validators: dict[str, jobgate.Validator] = {}


def _validator(config: Config | None) -> jobgate.Validator:
    """The worker process's validator for `config`, built once."""
    key = config.model_dump_json() if config is not None else ""
    validator = _validators.get(key)
    if validator is None:
        validator = _validators[key] = jobgate.Validator(config)
    return validator


def _compact(report: Any) -> str | dict[str, Any]:
    """A report as a task hands it back: a clean passing one as its kind alone (the
    driver shares one report per kind), any other as its dict."""
    return report.kind if report.ok and not report.violations else report.to_dict()


def packed_items(items: list[Item]) -> tuple[str, bytes, dict[int, str]]:
    """Items as a task takes them, in three objects whatever their number (a list of
    tuples would be serialized by Ray an object at a time): their paths joined by NUL
    (a character no path holds), a byte per item (1: a package, 2: unpacked), and the
    reasons of those that could not be listed, by position."""
    return (
        "\0".join(item.path for item in items),
        bytes(item.package + item.unpacked for item in items),
        {i: item.unlisted for i, item in enumerate(items) if item.unlisted is not None},
    )


def unpacked_items(packed: tuple[str, bytes, dict[int, str]]) -> list[Item]:
    paths, kinds, unlisted = packed
    return [Item(path, kind > 0, kind > 1, unlisted.get(i)) for i, (path, kind) in enumerate(zip(paths.split("\0"), kinds, strict=True))]


def _ray_judge_paths(configs: list[Config | None], packed: tuple[str, bytes, dict[int, str]], kind: str | None, cwd: str) -> list[bytes]:
    """The Ray task when the workers read the items (`packed_items`): each
    configuration's reports as the local engine makes them (`check_items`), from the
    driver's working directory so that relative paths name the same files; as JSON, an
    array of `_compact` reports (one object for Ray to carry, not one per item)."""
    if os.getcwd() != cwd:
        os.chdir(cwd)
    items = unpacked_items(packed)
    limits = (configs[0] or Config()).limits
    return [orjson.dumps([_compact(r) for r in check_items(_validator(config), items, kind, limits)]) for config in configs]


def _ray_judge(configs: list[Config | None], shipped: list[Payload], kind: str | None) -> list[bytes]:
    """The Ray task when the driver ships the items' bytes: the items' reports under
    each configuration, as JSON arrays of `_compact` reports.
    A validator per configuration is kept in the worker process, so the catalog is
    compiled once per worker, not once per chunk."""
    documents = [(i, p) for i, p in enumerate(shipped) if isinstance(p, bytes)]
    out = []
    for config in configs:
        validator = _validator(config)
        reports: list[Any] = list(shipped)
        for (i, _), report in zip(documents, validator.check_many([d for _, d in documents], kind, threads=1), strict=True):
            reports[i] = _compact(report)
        for i, p in enumerate(shipped):
            if isinstance(p, tuple):
                reports[i] = check_package(validator, *p, kind)
        out.append(orjson.dumps(reports))
    return out
