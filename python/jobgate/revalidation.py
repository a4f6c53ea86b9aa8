"""Batch revalidation of archived documents and job packages against the current
configuration: find the items, cut them into chunks, check the chunks on an engine,
put the reports back in the order the items were found.

Two engines run the same chunk function (`check_chunk`):

- `local`: a thread pool on this machine; the core releases the GIL, so the pool
  uses every core;
- `ray`: one Ray task per chunk on a Ray cluster. The driver reads the items and ships
  their bytes, so the cluster needs no filesystem in common with it.

A report crosses back as its plain dict (`report.to_dict()`), so both engines hand
the formatters the same values and print the same report. With a `ReportCache`,
items whose bytes, configuration and jobgate version are unchanged since a run that
checked them are not checked again.
"""

from __future__ import annotations

import io
import os
import socket
import sqlite3
import tarfile
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

import jobgate
from jobgate import _core, sources
from jobgate.config import Config, Limits
from jobgate.reports import renamed

BUNDLE_NAMES = ("bundle.json", "bundle.yaml", "bundle.yml")  # where a package holds its bundle (rust/src/files/package.rs)

PACKAGE_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.zst", ".tzst", ".zip")
CHUNK_ITEMS = 64
# Bumped whenever a report holds something new (2: each violation's line and column),
# so that a cache filled before never answers with the old shape.
REPORT_SHAPE = 2
CHUNK_BYTES = 32 << 20  # a chunk stops growing past this much to read and ship


@dataclass(frozen=True)
class Item:
    """One thing to revalidate: a document file, or a package (its own bundle and its
    supporting files) as an archive or, `unpacked`, as a directory."""

    path: str
    package: bool
    unpacked: bool = False


def is_package(path: Path) -> bool:
    return path.name.lower().endswith(PACKAGE_SUFFIXES)


def is_unpacked_package(directory: Path) -> bool:
    """A directory with the bundle at its top, as an archive package holds it."""
    return any((directory / name).is_file() for name in BUNDLE_NAMES)


def discover(paths: list[str]) -> list[Item]:
    """Files as given (archives are packages, anything else a document); directories
    become their documents and packages, in path order. A directory with a
    `bundle.json` (or `.yaml`, `.yml`) at its top is one package, not a folder of
    documents. Only regular files are items: a FIFO, socket or device named is
    refused (`sources.NotRegular`), one met in a directory is passed over, as
    `check` does. Raises FileNotFoundError naming a path that does not exist or a
    directory that holds nothing to revalidate."""
    items: list[Item] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = list(_walk(p))
            if not found:
                raise FileNotFoundError(f"{raw}: the directory holds no documents (.json, .yaml, .yml) or packages ({', '.join(PACKAGE_SUFFIXES)}, or a directory with a bundle.json)")
            items.extend(found)
        elif p.exists():
            sources.ensure_regular(raw)
            items.append(Item(raw, is_package(p)))
        else:
            raise FileNotFoundError(f"{raw}: no such file or directory")
    return items


def _walk(directory: Path) -> Iterator[Item]:
    """Depth first, entries sorted; symlinked directories are not entered (no loops)."""
    if is_unpacked_package(directory):
        yield Item(str(directory), True, unpacked=True)
        return
    try:
        with os.scandir(directory) as listing:  # one stat per entry, names compared as text
            entries = sorted(listing, key=lambda e: e.name)
    except OSError as e:
        raise FileNotFoundError(f"{directory}: cannot list: {e.strerror or e}") from None
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path))
            continue
        name = entry.name.lower()
        package = name.endswith(PACKAGE_SUFFIXES)
        if (package or name.endswith(sources.DOCUMENT_SUFFIXES)) and entry.is_file():
            yield Item(entry.path, package)


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


def chunks(items: list[Item]) -> Iterator[list[Item]]:
    """Consecutive runs of at most CHUNK_ITEMS items and about CHUNK_BYTES bytes."""
    chunk: list[Item] = []
    size = 0
    for item in items:
        try:
            size += os.stat(item.path).st_size
        except OSError:
            pass  # reported when the chunk reads it
        chunk.append(item)
        if len(chunk) >= CHUNK_ITEMS or size >= CHUNK_BYTES:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


@dataclass(frozen=True)
class Entry:
    """An item as a chunk carries it: its bytes, or the core's report refusing it
    (`Report.to_dict()` shape) when it could not be read, or (a package on this
    machine's disk) only its path."""

    source: str
    package: bool
    data: bytes | None = None
    refusal: dict[str, Any] | None = None
    path: str | None = None


def read_chunk(chunk: list[Item], *, ship_packages: bool, limits: Limits, kind: str | None) -> list[Entry]:
    """The chunk's entries. Archives are read too when `ship_packages` (for another
    machine); otherwise they are verified where they lie. Unpacked packages are
    always packed. A document over the size limit is refused unread; an item that
    cannot be read gets the report the core gives it, for documents of `kind`."""

    def unreadable(reason: str) -> dict[str, Any]:
        return _core.refused_unreadable(reason, kind=kind).to_dict()

    out: list[Entry] = []
    for item in chunk:
        if item.package and not item.unpacked and not ship_packages:
            out.append(Entry(item.path, True, path=item.path))
            continue
        try:
            if item.unpacked:
                data = pack(item.path, limits.max_package_bytes)
            elif item.package:
                with sources.open_regular(item.path) as f:
                    data = f.read()
            else:
                data = sources.read(item.path, limits.max_document_bytes).data
            out.append(Entry(item.path, item.package, data=data))
        except (PackageTooLarge, sources.TooLarge) as e:
            out.append(Entry(item.path, item.package, refusal=e.report(kind)))
        except sources.NotRegular as e:  # replaced by a FIFO or socket since it was found
            out.append(Entry(item.path, item.package, refusal=unreadable(str(e))))
        except OSError as e:
            out.append(Entry(item.path, item.package, refusal=unreadable(f"cannot read {e.filename or item.path}: {e.strerror or e}")))
        except ValueError as e:  # a name the system cannot encode, say: not a size
            out.append(Entry(item.path, item.package, refusal=unreadable(f"cannot read {item.path}: {e}")))
    return out


def check_chunk(validator: jobgate.Validator, entries: list[Entry], kind: str | None, threads: int | None = None) -> list[dict[str, Any]]:
    """Report dicts for a chunk, in its order. Documents are checked together
    (check_many); a package is verified with its supporting files, from a private
    temporary copy when its bytes came from another machine."""
    reports: list[dict[str, Any] | None] = [None] * len(entries)
    documents = [(i, e.data) for i, e in enumerate(entries) if e.data is not None and not e.package]
    for (i, _), report in zip(documents, validator.check_many([d for _, d in documents], kind, threads=threads), strict=True):
        reports[i] = report.to_dict()
    for i, e in enumerate(entries):
        if e.refusal is not None:
            reports[i] = e.refusal
        elif e.package and e.path is not None:
            reports[i] = validator.check(None, kind=kind, package=e.path).to_dict()
        elif e.package:
            with sources.spooled(e.data or b"") as path:  # named as the package, not its copy
                reports[i] = renamed(validator.check(None, kind=kind, package=path).to_dict(), path, e.source)
    return [r for r in reports if r is not None]


class EngineError(Exception):
    """The engine cannot run (Ray missing or unreachable); the message says why."""


Progress = Callable[[int], None]


def run_local(items: list[Item], config: Config | None, kind: str | None, progress: Progress, threads: int | None = None) -> list[dict[str, Any]]:
    """Chunks on a thread pool of `threads` (default: every core); each chunk reads its
    files and checks them with the GIL released, so reading overlaps checking."""
    validator = jobgate.Validator(config)
    workers = threads or len(os.sched_getaffinity(0))
    limits = (config or Config()).limits

    def work(chunk: list[Item]) -> list[dict[str, Any]]:
        reports = check_chunk(validator, read_chunk(chunk, ship_packages=False, limits=limits, kind=kind), kind, threads=1)
        progress(len(chunk))
        return reports

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jobgate-revalidate") as pool:
        return [r for reports in pool.map(work, chunks(items)) for r in reports]


def run_ray(items: list[Item], config: Config | None, kind: str | None, progress: Progress, address: str | None) -> list[dict[str, Any]]:
    """One Ray task per chunk. With `address` the driver joins that cluster (`auto`
    finds a local one, `ray://host:port` is a Ray Client address); without, it starts
    a private local Ray. At most twice the cluster's CPUs of chunks are in flight, so
    the driver never holds the whole archive in memory."""
    with ray_session(address) as ray:
        task = ray.remote(_ray_check_chunk).options(num_cpus=1)
        limits = (config or Config()).limits
        window = max(2, 2 * int(ray.cluster_resources().get("CPU", 1)))
        config_ref = ray.put(config)
        pending: dict[Any, int] = {}
        done: dict[int, list[dict[str, Any]]] = {}
        sizes: dict[int, int] = {}
        for n, chunk in enumerate(chunks(items)):
            while len(pending) >= window:
                _collect(ray, pending, done, sizes, progress)
            pending[task.remote(config_ref, read_chunk(chunk, ship_packages=True, limits=limits, kind=kind), kind)] = n
            sizes[n] = len(chunk)
        while pending:
            _collect(ray, pending, done, sizes, progress)
        return [r for n in sorted(done) for r in done[n]]


@contextmanager
def ray_session(address: str | None) -> Iterator[Any]:
    """Ray, joined (or a private local one started) for the block, and left after;
    inside another session, that one is used. Two judgments of one archive
    (`--against`) share one session."""
    try:
        import ray
    except ImportError:
        raise EngineError("the ray engine needs Ray: pip install 'jobgate[ray]'") from None
    started_here = not ray.is_initialized()
    if started_here:
        if address and address != "auto":
            reachable(address)
        try:
            ray.init(address=address, include_dashboard=False, logging_level="ERROR", log_to_driver=False, configure_logging=False)
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


def _collect(ray, pending: dict, done: dict, sizes: dict, progress: Progress) -> None:
    ready, _ = ray.wait(list(pending), num_returns=1)
    for ref in ready:
        n = pending.pop(ref)
        try:
            done[n] = ray.get(ref)
        except ray.exceptions.RayError as e:  # a worker died or the task could not run
            first = str(e).splitlines()[0] if str(e) else ""
            raise EngineError(f"a Ray task failed, {sizes[n]} items unchecked; nothing was reported: {type(e).__name__}: {first}") from None
        progress(sizes[n])


_validators: dict[str, jobgate.Validator] = {}


def _ray_check_chunk(config: Config | None, entries: list[Entry], kind: str | None) -> list[dict[str, Any]]:
    """The Ray task: a validator per configuration is kept in the worker process, so
    the catalog is compiled once per worker, not once per chunk."""
    key = config.model_dump_json() if config is not None else ""
    validator = _validators.get(key)
    if validator is None:
        validator = _validators[key] = jobgate.Validator(config)
    return check_chunk(validator, entries, kind, threads=1)


class CacheError(Exception):
    """The report cache file cannot be opened or written; the message says why."""


class ReportCache:
    """Reports of items already revalidated, in a SQLite file, so a rerun over an
    unchanged archive checks nothing again. An item's key is the BLAKE3 hash of its
    name and bytes (an unpacked package: the tar it packs to), salted with what a
    report depends on besides: jobgate's version, the configuration and `--kind`. A
    changed item, configuration or version misses and is checked afresh; a hit is the
    very report the check gave."""

    def __init__(self, path: str, config: Config | None, kind: str | None) -> None:
        shape = str(REPORT_SHAPE)
        self.salt = b"".join(part.encode() + b"\0" for part in (jobgate.__version__, shape, (config or Config()).model_dump_json(), kind or ""))
        self.limits = (config or Config()).limits
        try:
            self.db = sqlite3.connect(path)
            self.db.execute("CREATE TABLE IF NOT EXISTS reports (key TEXT PRIMARY KEY, report TEXT NOT NULL)")
            self.db.commit()
        except sqlite3.Error as e:
            raise CacheError(f"{path}: cannot use it as a revalidation cache: {e}") from None
        self.path = path

    def keys(self, items: list[Item]) -> list[str | None]:
        """Every item's key, or None for one that cannot be read (the engine reports
        that). The core reads and hashes the files on every core in one call: keying
        an archive of small items is all opening and reading."""
        named: list[tuple[str, bytes | None]] = []
        for item in items:
            data = None
            if item.unpacked:
                try:
                    data = pack(item.path, self.limits.max_package_bytes)
                except (OSError, ValueError):
                    named.append(("", None))  # an empty name opens nothing: no key
                    continue
            named.append((item.path, data))
        return _core.content_keys(self.salt, named)

    def get(self, keys: list[str | None]) -> dict[str, dict[str, Any]]:
        wanted = [k for k in keys if k is not None]
        found: dict[str, dict[str, Any]] = {}
        try:
            for start in range(0, len(wanted), 500):
                batch = wanted[start : start + 500]
                rows = self.db.execute(f"SELECT key, report FROM reports WHERE key IN ({','.join('?' * len(batch))})", batch)
                found.update((k, orjson.loads(r)) for k, r in rows)
        except (sqlite3.Error, orjson.JSONDecodeError) as e:
            raise CacheError(f"{self.path}: cannot read the revalidation cache: {e}") from None
        return found

    def put(self, reports: dict[str, dict[str, Any]]) -> None:
        try:
            with self.db:
                self.db.executemany("INSERT OR REPLACE INTO reports VALUES (?, ?)", [(k, orjson.dumps(r).decode()) for k, r in reports.items()])
        except sqlite3.Error as e:
            raise CacheError(f"{self.path}: cannot write the revalidation cache: {e}") from None


def run_cached(items: list[Item], cache: ReportCache, progress: Progress, engine: Callable[[list[Item]], list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Reports for `items`: cached ones as they were, the others from `engine`, which
    are then remembered."""
    keys = cache.keys(items)
    cached = cache.get(keys)
    progress(sum(1 for k in keys if k in cached))
    todo = [i for i, k in enumerate(keys) if k not in cached]
    fresh = engine([items[i] for i in todo])
    cache.put({keys[i]: report for i, report in zip(todo, fresh, strict=True) if keys[i] is not None})
    reports: list[dict[str, Any]] = [cached[k] if k in cached else {} for k in keys]
    for i, report in zip(todo, fresh, strict=True):
        reports[i] = report
    return reports
